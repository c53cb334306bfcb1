# SPDX-License-Identifier: Apache-2.0
"""Row-level changes: ``update``, ``merge_insert`` and ``insert``, each one ``Update`` (or
``Append``) transaction of :mod:`lance_gpu.txn`, as pylance writes them.

Rewrite-rows layout (pylance's): the changed rows are deleted from the fragments that held
them (a new deletion vector, or the fragment is removed when no row is left) and written,
with their new values, as new fragments at the end of the dataset.  Only the touched
fragments change; untouched fragments keep their files and deletion vectors.  With stable
row ids the rewritten rows keep their ids (the new fragments carry them); inserted rows get
fresh ids at commit.

Reads go through the scan API with ``_rowaddr`` (``fragment_id << 32 | physical offset``),
which places every row without a row-id lookup:

* ``update`` reads, for the rows ``where`` selects, only the columns the new rows need
  (a column whose new value does not read its old one is not read at all);
* ``merge_insert`` reads only the key columns to find matches (an integer key is joined
  through :mod:`lance_gpu.cpu.keyjoin`'s hash table); target rows are read whole only for
  a ``when_matched_update_all(condition=)``, and then only the matched ones.

Both operations re-plan themselves on the latest version after a retryable conflict
(``conflict_retries``, default 10), as pylance's do.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_gpu._proto import table_pb2
from lance_gpu.errors import IncompatibleSchemaError, InvalidArgumentError, MergeInsertError, PlanNotSupportedError, SchemaMismatchError
from lance_gpu.scan import ReadUnit, build_plan, concat, decode_spans, executor_for, resolve, rows_where, run_plan, scanner_for
from lance_gpu.scan.plan import ROW_ADDR, ROW_ID
from lance_gpu.table.blobs import BLOB_META_KEY, blob_kind, with_blob_bytes
from lance_gpu.table.deletion_writer import fragment_with_deletions
from lance_gpu.table.features import FLAG_STABLE_ROW_IDS
from lance_gpu.table.manifest import ManifestFile
from lance_gpu.table.rowids import encode_row_ids, encode_versions, read_fragment_versions
from lance_gpu.txn.commit import DEFAULT_COMMIT_LOCK, DEFAULT_CONFLICT_RETRIES, commit_file, run_with_retries
from lance_gpu.txn.operations import Update
from lance_gpu.txn.transaction import Transaction
from lance_gpu.write.dataset_writer import (
    DEFAULT_MAX_BYTES_PER_FILE,
    DEFAULT_MAX_ROWS_PER_FILE,
    _write_fragments,
    dataset_file_minor,
    write_version,
)
from lance_gpu.write.inputs import cast_batch, coerce_input

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable

    from lance_gpu.filter import CompiledFilter
    from lance_gpu.table.schema import LanceField
    from lance_gpu.table.snapshot import TableSnapshot

__all__ = ["MergeInsertBuilder", "insert", "row_addresses", "update"]

_SRC = "__lance_gpu_source_row__"
_TGT = "__lance_gpu_target_row__"
_NO_ID = np.iinfo(np.uint64).max  # an inserted row's carried id: assigned at commit
# Deletion files written at once (each put ends in an fsync on a local store).
_DELETION_WRITERS = 8
#: Rows newly deleted from one fragment up to which its deletion file is written in the
#: calling thread: a thread started for a small file costs more than the overlap gains
#: (thread start and GIL hand-offs against ~0.1 ms of work).
_INLINE_DELETIONS = 1 << 16
#: Live rows up to which an ``update`` reads its columns of every row and evaluates
#: ``where`` on them at once (:func:`_small_update_rows`) instead of planning a scan.
_SMALL_UPDATE_ROWS = 1 << 14


class _InlineExecutor:
    """Runs what is submitted at once, in the calling thread (the few-rows case of
    :meth:`_RowChange.commit`); the same ``submit`` / ``shutdown`` as a ThreadPoolExecutor."""

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args))
        except BaseException as exc:
            future.set_exception(exc)
        return future

    def shutdown(self, wait: bool = True) -> None:
        pass


def _stable(ds: TableSnapshot) -> bool:
    return bool(int(ds.manifest.writer_feature_flags) & FLAG_STABLE_ROW_IDS)


def row_addresses(ds: TableSnapshot, row_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(fragment id, physical offset) of each ``_rowid`` that ``to_table(with_row_id=True)``
    gave: the address itself (``fragment_id << 32 | offset``), or, on a dataset with stable
    row ids, looked up in the fragments' row-id sequences."""
    ids = np.asarray(row_ids, dtype=np.uint64)
    if not _stable(ds):
        return split_addresses(ids)
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


def split_addresses(addresses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(fragment id, physical offset) of row addresses ``fragment_id << 32 | offset``."""
    a = np.asarray(addresses, dtype=np.uint64)
    return (a >> np.uint64(32)).astype(np.int64), (a & np.uint64(0xFFFFFFFF)).astype(np.int64)


def _by_fragment(frag_ids: np.ndarray) -> dict[int, np.ndarray]:
    """Positions of each fragment id in ``frag_ids``, in order.  A scan yields a fragment's
    rows as one run, so the runs are found first; an id seen in several runs is merged."""
    if frag_ids.size == 0:
        return {}
    cuts = np.flatnonzero(frag_ids[1:] != frag_ids[:-1]) + 1
    starts = np.concatenate([[0], cuts])
    stops = np.concatenate([cuts, [frag_ids.size]])
    out: dict[int, np.ndarray] = {}
    for a, b in zip(starts.tolist(), stops.tolist(), strict=True):
        fid = int(frag_ids[a])
        run = np.arange(a, b, dtype=np.int64)
        out[fid] = np.concatenate([out[fid], run]) if fid in out else run
    return out


def _row_ids_at(ds: TableSnapshot, frag_ids: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The stable row id of each (fragment id, physical offset)."""
    out = np.empty(frag_ids.size, np.uint64)
    for fid, pos in _by_fragment(frag_ids).items():
        frag = ds.get_fragment(fid)
        assert frag is not None, f"fragment {fid} read from the dataset is not in it"
        out[pos] = np.asarray(frag.row_ids, np.uint64)[offsets[pos]]
    return out


def _created_at(ds: TableSnapshot, frag_ids: np.ndarray, offsets: np.ndarray) -> np.ndarray | None:
    """The creation version of each row (by fragment id and physical offset), None when the
    dataset records none."""
    out = np.zeros(frag_ids.size, np.uint64)
    for fid, pos in _by_fragment(frag_ids).items():
        frag = ds.get_fragment(fid)
        assert frag is not None, f"fragment {fid} read from the dataset is not in it"
        versions = read_fragment_versions(ds.store, ds.root, frag.pb, "created_at")
        if versions is None:
            return None
        out[pos] = np.asarray(versions, np.uint64)[offsets[pos]]
    return out


def _read_at(ds: TableSnapshot, addresses: np.ndarray, device: str) -> pa.Table:
    """Every column of the rows at ``addresses`` (unique), in the order given."""
    frag_ids, offsets = split_addresses(addresses)
    order = np.lexsort((offsets, frag_ids))
    selections = {fid: offsets[order[pos]] for fid, pos in _by_fragment(frag_ids[order]).items()}
    plan = build_plan(ds, with_row_address=True, selections=selections, device=device)
    table = concat(list(run_plan(plan, executor_for(device), ds)), resolve(plan, ds).schema)
    got = table.column(ROW_ADDR).to_numpy()
    # the plan reads fragments in manifest order: put its rows in the caller's order
    where = np.argsort(got, kind="stable")[np.searchsorted(np.sort(got), np.asarray(addresses, np.uint64))]
    return table.drop_columns([ROW_ADDR]).take(pa.array(where))


class _Scanned:
    """``columns`` of every live row of ``ds`` in scan order, and the row address of any of
    them on demand (a scan's rows are each fragment's live rows in turn, so a position
    is placed by the fragments' live counts: no address column over every row)."""

    def __init__(self, ds: TableSnapshot, columns: Sequence[str], device: str) -> None:
        plan = build_plan(ds, columns=list(columns), device=device)
        self.table = concat(list(run_plan(plan, executor_for(device), ds)), resolve(plan, ds).schema)
        # live counts from the snapshot's arrays; fragment objects only for rows asked after
        self.ds = ds
        self.positions = ds.positions_of(plan.fragment_ids)
        every = ds.live_counts()
        counts = np.array([every[p] for p in self.positions], np.int64)
        self.starts = np.zeros(counts.size + 1, np.int64)
        np.cumsum(counts, out=self.starts[1:])
        assert self.starts[-1] == self.table.num_rows, "a scan returned another number of rows than live"

    def addresses(self, rows: np.ndarray) -> np.ndarray:
        """``fragment_id << 32 | physical offset`` of the scan's rows ``rows``."""
        rows = np.asarray(rows, np.int64)
        out = np.empty(rows.size, np.uint64)
        which = np.searchsorted(self.starts, rows, side="right") - 1
        for i in np.flatnonzero(np.bincount(which, minlength=len(self.positions))).tolist():
            frag = self.ds.fragment_at(self.positions[i])
            sel = which == i
            local = rows[sel] - self.starts[i]
            live = frag.live_rows
            out[sel] = frag.row_addresses(local if live is None else live[local])
        return out


class _RowChange:
    """The rows one attempt deletes from existing fragments and the rows it writes."""

    def __init__(self, ds: TableSnapshot) -> None:
        self.ds = ds
        self.store, self.root = ds.store, ds.root
        self.deleted: dict[int, list[np.ndarray]] = {}
        #: data files and bytes an unpublished commit wrote (then removed)
        self.written_files = 0
        self.written_bytes = 0
        #: the Update a ``stage_only`` commit wrote the files of, not committed
        self.operation: Update | None = None

    def delete_rows(self, frag_ids: np.ndarray, offsets: np.ndarray) -> None:
        for fid, pos in _by_fragment(frag_ids).items():
            self.deleted.setdefault(fid, []).append(offsets[pos])

    def commit(
        self,
        new_rows: pa.Table | None,
        carried_ids: np.ndarray | None,
        created_at: np.ndarray | None = None,
        *,
        publish: bool = True,
        stage_only: bool = False,
    ) -> ManifestFile | None:
        """Write ``new_rows`` as new fragments (with ``carried_ids`` as their stable row ids
        and ``created_at`` as their rows' creation versions where given; u64::MAX marks an
        inserted row), the new deletion vectors, and commit one Update.  The deletion files
        are written in threads while the new rows are encoded.

        ``publish=False`` (an ``analyze_plan``) writes the files, records what was written in
        :attr:`written_files` / :attr:`written_bytes` (data files), removes them and commits
        nothing.  ``stage_only=True`` (``execute_uncommitted``) writes the files and keeps the
        Update in :attr:`operation` for the caller to commit."""
        ds = self.ds
        op = Update()
        small = len(self.deleted) <= 1 and sum(p.size for parts in self.deleted.values() for p in parts) <= _INLINE_DELETIONS
        pool = _InlineExecutor() if small else ThreadPoolExecutor(max(1, min(_DELETION_WRITERS, len(self.deleted))))
        try:
            deletions = self._write_deletions(pool, op)
            new_frags = self._write_rows(op, new_rows, carried_ids, created_at)
            removed, updated = [], []
            for fid, future in deletions:
                new = future.result()
                if new is None:
                    removed.append(fid)
                else:
                    updated.append(new)
            op.removed_fragment_ids = removed
            op._updated = updated
            op._new = new_frags
            if not publish:
                data = [k for k in op.written if "/data/" in f"/{k}"]
                self.written_files, self.written_bytes = len(data), sum(self.store.size(k) for k in data)
                op.cleanup(self.store)
                return None
            if stage_only:
                self.operation = op
                return None
            return commit_file(self.store, self.root, op, ds.manifest_file, ds.naming)
        except BaseException:
            pool.shutdown(wait=True)
            op.cleanup(self.store)
            raise
        finally:
            pool.shutdown(wait=True)

    def _write_deletions(self, pool: ThreadPoolExecutor | _InlineExecutor, op: Update) -> list[tuple[int, Any]]:
        """Start writing each touched fragment's new deletion file (every deleted offset,
        old and new); the futures give the fragment's new manifest entry, or None when no
        row is left (the fragment is removed)."""
        ds = self.ds
        futures = []
        for fid, parts in sorted(self.deleted.items()):
            fragment = ds.get_fragment(fid)
            assert fragment is not None, f"fragment {fid} read from the dataset is not in it"
            new = np.concatenate(parts)
            old = fragment.deleted_rows
            rows = np.union1d(old, new) if old.size or len(parts) > 1 else np.sort(new)
            rows = rows.astype(np.uint32)
            # list.append is atomic: the threads add the keys they write to op.written
            futures.append((fid, pool.submit(fragment_with_deletions, self.store, self.root, fragment.pb, ds.version,
                                             rows, op.written)))
        return futures

    def _write_rows(
        self, op: Update, new_rows: pa.Table | None, carried_ids: np.ndarray | None, created_at: np.ndarray | None
    ) -> list[table_pb2.DataFragment]:
        """The new fragments of ``new_rows`` (their files' keys go to ``op.written``)."""
        if new_rows is None or not new_rows.num_rows:
            return []
        ds = self.ds
        schema = ds.lance_schema
        physical = schema.to_arrow(physical=True)
        minor = dataset_file_minor(ds.manifest)
        groups: list[tuple[pa.Table, np.ndarray | None, np.ndarray | None]] = [(new_rows, None, None)]
        if carried_ids is not None:
            # rows with an id (rewritten) and without (inserted) go to separate
            # fragments: a fragment's row ids are all carried or all assigned
            fresh = carried_ids == _NO_ID
            groups = [
                (new_rows.filter(pa.array(~fresh)), carried_ids[~fresh],
                 None if created_at is None else created_at[~fresh]),
                (new_rows.filter(pa.array(fresh)), None, None),
            ]
        new_frags: list[table_pb2.DataFragment] = []
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
        return new_frags


def _run(ds: TableSnapshot, attempt: Any, conflict_retries: int) -> tuple[TableSnapshot, Any]:
    """``attempt(target)`` on ``ds``, then on the latest version after each retryable
    conflict.  ``attempt`` returns (committed manifest file or None, result); returns the
    committed version's snapshot (``ds`` when nothing was committed) and the result."""
    first = [True]

    def once() -> Any:
        target = ds if first[0] else ds.latest()
        first[0] = False
        return attempt(target)

    committed, result = run_with_retries(once, conflict_retries)
    return (ds if committed is None else ds.committed(committed)), result


# --------------------------------------------------------------------------------------------
# update


def _small_update_rows(
    ds: TableSnapshot, read: Sequence[str], where: str | pc.Expression | None, device: str
) -> tuple[pa.Table, np.ndarray, np.ndarray] | None:
    """The rows ``where`` selects on a small dataset (at most :data:`_SMALL_UPDATE_ROWS`
    live rows, no blob column, a predicate of stored columns only), read on the CPU without
    planning a scan: ``where``'s columns of every live row decoded at once per span of
    fragments (:func:`~lance_gpu.scan.decode_spans`) and ``where`` evaluated once per span,
    then the columns ``read`` of the rows it selects, fragment by fragment as units of their
    rows (a fragment without a hit is not read again).  Returns (rows as the scan gives them,
    in scan order; their fragment ids; their physical offsets), or None where the scan is
    planned instead (larger data, ``device="gpu"``, blobs, virtual columns).

    A scan of a few small fragments spends more on planning and on late materialization
    (a take per column of the few hits) than on decoding them."""
    from lance_gpu.filter import parse_filter

    if device not in ("auto", "cpu") or not read or sum(ds.live_counts()) > _SMALL_UPDATE_ROWS:
        return None
    top = {f.name: f for f in ds.lance_schema.fields}
    compiled = None if where is None else parse_filter(where, ds.schema)
    if compiled is not None and compiled.virtual_columns:
        return None
    needed = set(read) | set(compiled.columns if compiled is not None else ())
    if any(name not in top or blob_kind(top[name]) for name in needed):
        return None
    units = [ReadUnit(frag, frag.live_rows) for frag in ds.fragments]
    if compiled is not None:
        units = _selected_units(ds, units, compiled, [top[n] for n in compiled.columns])
    tables: list[pa.Table] = []
    for _group, table in decode_spans(ds, units, [f for f in ds.lance_schema.fields if f.name in read]):
        tables.append(table.select(list(read)))
    if not tables:
        schema = pa.schema([ds.schema.field(name) for name in read], metadata=ds.schema.metadata)
        return schema.empty_table(), np.zeros(0, np.int64), np.zeros(0, np.int64)
    offsets = [np.arange(u.fragment.physical_rows, dtype=np.int64) if u.rows is None else u.rows.astype(np.int64)
               for u in units]
    frag_ids = np.repeat(np.array([u.fragment.fragment_id for u in units], np.int64), [u.num_rows for u in units])
    return pa.concat_tables(tables), frag_ids, np.concatenate(offsets)


def _selected_units(ds: TableSnapshot, units: list[ReadUnit], compiled: CompiledFilter,
                    fields: list[LanceField]) -> list[ReadUnit]:
    """``units`` cut to the rows ``compiled`` holds on (fields: its columns; none: it is
    evaluated on row counts alone), dropping those without one; a unit whose every row
    holds is kept as it was."""
    out: list[ReadUnit] = []
    for group, table in decode_spans(ds, units, fields):
        for k, rows in rows_where(group, compiled.positions(table)):
            unit = group[k]
            out.append(unit if rows.size == unit.num_rows else ReadUnit(unit.fragment, rows))
    return out


def update(
    ds: TableSnapshot,
    updates: Mapping[str, str],
    where: str | pc.Expression | None = None,
    conflict_retries: int = DEFAULT_CONFLICT_RETRIES,
    retry_timeout: Any = None,
    data_storage_version: str | None = None,
    *,
    device: str = "auto",
) -> tuple[TableSnapshot, dict[str, int]]:
    """Set ``updates`` (column -> SQL expression over the row) on the rows matching
    ``where`` (all rows when None), reading with ``device``; returns the committed version's
    snapshot and ``{"num_rows_updated": n}`` (pylance's)."""
    if not isinstance(updates, Mapping) or not updates:
        raise ValueError("update: updates must be a non-empty dict of column name to SQL expression")
    names = set(ds.schema.names)
    for col in updates:
        if col not in names:
            raise SchemaMismatchError(f"update: column {col!r} does not exist in the dataset")

    def attempt(target: TableSnapshot) -> tuple[ManifestFile | None, dict[str, int]]:
        from lance_gpu.filter import compile_expression

        schema = target.schema
        compiled = {col: compile_expression(text, schema, f"update expression {col!r} =") for col, text in updates.items()}
        needs = {c for expr in compiled.values() for c in expr.columns}
        # a column whose new value does not read its old one is never read
        read = [n for n in schema.names if n not in compiled or n in needs]
        with_row_id = any(ROW_ID in expr.virtual_columns for expr in compiled.values())
        small = None if with_row_id else _small_update_rows(target, read, where, device)
        if small is not None:
            rows, frag_ids, offsets = small
        else:
            rows = scanner_for(target, columns=read, filter=where, with_row_address=True,
                               with_row_id=with_row_id or None, device=device).to_table()
            frag_ids, offsets = split_addresses(rows.column(ROW_ADDR).to_numpy())
        if rows.num_rows == 0:  # pylance commits an empty Update too
            return _RowChange(target).commit(None, None), {"num_rows_updated": 0}
        rows = with_blob_bytes(target, rows, frag_ids, offsets)  # blob columns are rewritten from their bytes
        arrays, fields = [], []
        for field in schema:
            if field.name not in compiled:
                arrays.append(rows.column(field.name))
                fields.append(rows.schema.field(field.name))
                continue
            fields.append(field)
            try:
                arrays.append(compiled[field.name].evaluate(rows).cast(field.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                msg = f"update: the value of {field.name!r} cannot be stored as {field.type}: {exc}"
                raise SchemaMismatchError(msg) from exc
        new_rows = pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=schema.metadata))
        change = _RowChange(target)
        change.delete_rows(frag_ids, offsets)
        carried = created = None
        if _stable(target):
            carried = _row_ids_at(target, frag_ids, offsets)
            created = _created_at(target, frag_ids, offsets)
        manifest = change.commit(new_rows, carried, created)
        return manifest, {"num_rows_updated": int(new_rows.num_rows)}

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

    def __init__(self, ds: TableSnapshot, on: str | Iterable[str] | None, *, device: str = "auto",
                 on_commit: Callable[[TableSnapshot], None] | None = None, commit_lock: Any = None) -> None:
        self._ds = ds
        self._device = device
        self._on_commit = on_commit
        self._commit_lock = commit_lock  # the dataset's commit_lock=, held around the commit
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
        self._use_index = True

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
        self._use_index = bool(use_index)
        return self

    def _actions(self) -> str:
        matched = {"update": "UpdateAll", "delete": "Delete", "fail": "Fail", None: "DoNothing"}[self._matched]
        if self._matched == "update" and self._matched_condition is not None:
            matched = f"UpdateIf({self._matched_condition})"
        by_source = "Keep"
        if self._by_source_delete:
            by_source = "Delete" if self._by_source_expr is None else f"DeleteIf({self._by_source_expr})"
        return (f"MergeInsert: on=[{', '.join(self._on)}], when_matched={matched}, "
                f"when_not_matched={'InsertAll' if self._insert else 'DoNothing'}, when_not_matched_by_source={by_source}")

    def explain_plan(self, schema: pa.Schema | None = None, verbose: bool = False) -> str:
        """The merge's plan as text (pylance's ``explain_plan``): the actions, the join of
        the dataset's key columns (read with ``_rowid`` / ``_rowaddr``) with the source.

        Parameters
        ----------
        schema : pyarrow.Schema, optional
            The source's schema (default: the dataset's); it must be the dataset's.
        verbose : bool, default False
            Also name the columns each side reads.

        Raises
        ------
        PlanNotSupportedError
            (an ``OSError``, as pylance's) when the source schema is not the dataset's, or
            when a scalar index on a key column would serve the join (``use_index(True)``).
        """
        target = _source_schema(self._ds)
        indexed = {int(f) for idx in self._ds.index_metadata for f in idx.fields}
        key_ids = {self._ds.lance_schema.field(k).id for k in self._on}
        if (schema is not None and not schema.equals(target)) or (self._use_index and indexed & key_ids):
            raise PlanNotSupportedError(
                "Not supported: This merge insert configuration does not support explain_plan: either the source "
                "schema is not one the plan path accepts, or the join takes the scalar-index execution path."
            )
        join = "Left" if self._by_source_delete and not self._insert else "Full" if self._by_source_delete else "Right"
        lines = [
            self._actions(),
            f"  HashJoinExec: join_type={join}, on=[{', '.join(f'({k}, {k})' for k in self._on)}]",
            f"    LanceRead: uri={self._ds.store.uri(self._ds.root)}, projection=[{', '.join(self._on)}], "
            f"num_fragments={len(self._ds.fragments)}, row_id=true, row_addr=true",
            f"    Source: projection=[{', '.join(target.names)}]",
        ]
        if verbose:
            lines.append(f"  retries={self._retries}, use_index={self._use_index}, device={self._device}")
        return "\n".join(lines)

    def analyze_plan(self, data_obj: Any, *, schema: pa.Schema | None = None) -> str:
        """Run the merge without committing it and report what it did (pylance's
        ``analyze_plan``): rows inserted / updated / deleted, data files and bytes written
        (the files are removed again; the dataset does not change).

        Parameters
        ----------
        data_obj : data
            The source rows, as :meth:`execute` takes them.
        schema : pyarrow.Schema, optional
            The source's schema.
        """
        source = self._source(data_obj, schema)
        start = time.perf_counter()
        _manifest, stats, change = self._attempt(self._ds, source, publish=False)
        elapsed = (time.perf_counter() - start) * 1e3
        metrics = (
            f"bytes_written={change.written_bytes}, num_deleted_rows={stats['num_deleted_rows']}, "
            f"num_files_written={change.written_files}, num_inserted_rows={stats['num_inserted_rows']}, "
            f"num_updated_rows={stats['num_updated_rows']}"
        )
        return (f"AnalyzeExec verbose=true, elapsed={elapsed:.3f}ms, metrics=[]\n"
                f"  {self._actions().replace('MergeInsert:', f'MergeInsert: elapsed={elapsed:.3f}ms,', 1)}, "
                f"metrics=[{metrics}]")

    def _source(self, data_obj: Any, schema: pa.Schema | None) -> pa.Table:
        if self._matched is None and not self._insert and not self._by_source_delete:
            raise InvalidArgumentError("merge_insert: the merge insert job is not configured to change the data in any "
                                       "way (add when_matched_update_all, when_not_matched_insert_all, ...)")
        target_schema = _source_schema(self._ds)
        _s, batches = coerce_input(data_obj, schema)
        source = pa.Table.from_batches(list(batches), schema=_s)
        keys_only = not self._insert and self._matched in (None, "delete")
        source = _check_source(source, target_schema, self._on, keys_only, inserts=self._insert)
        return source.combine_chunks()

    def execute(self, data_obj: Any, *, schema: pa.Schema | None = None) -> dict[str, int]:
        """Run the merge; returns ``{"num_inserted_rows", "num_updated_rows",
        "num_deleted_rows"}``; the committed version's snapshot goes to ``on_commit``."""
        source = self._source(data_obj, schema)
        token = DEFAULT_COMMIT_LOCK.set(self._commit_lock) if self._commit_lock is not None else None
        try:
            committed, result = _run(self._ds, lambda target: self._attempt(target, source)[:2], self._retries)
        finally:
            if token is not None:
                DEFAULT_COMMIT_LOCK.reset(token)
        if self._on_commit is not None and committed is not self._ds:
            self._on_commit(committed)
        return result

    def execute_uncommitted(self, data_obj: Any, *, schema: pa.Schema | None = None) -> tuple[Transaction, dict[str, int]]:
        """Run the merge, writing its data and deletion files, without committing: returns
        ``(Transaction, stats)`` as pylance's, the transaction (an ``Update`` planned on this
        version) for ``LanceDataset.commit(dataset, transaction)``.

        Parameters
        ----------
        data_obj : data
            The source rows, as :meth:`execute` takes them.
        schema : pyarrow.Schema, optional
            The source's schema.
        """
        source = self._source(data_obj, schema)
        _manifest, stats, change = self._attempt(self._ds, source, stage_only=True)
        operation = change.operation if change.operation is not None else Update()
        return Transaction(read_version=self._ds.version, operation=operation), stats

    def _attempt(self, ds: TableSnapshot, source: pa.Table, publish: bool = True, stage_only: bool = False
                 ) -> tuple[ManifestFile | None, dict[str, int], _RowChange]:
        on = self._on
        scanned = _Scanned(ds, on, self._device)
        target = scanned.table
        tgt_idx, src_idx = _match(target, source, on)
        if self._matched == "fail" and tgt_idx.size:
            raise MergeInsertError("merge_insert: when_matched_fail and source rows match existing rows")
        matched_src = np.zeros(source.num_rows, np.bool_)
        matched_src[src_idx] = True
        act_tgt, act_src = tgt_idx, src_idx
        if self._matched == "update" and self._matched_condition is not None and tgt_idx.size:
            # the condition reads both sides: only the matched target rows are read whole
            matched_rows = _read_at(ds, scanned.addresses(tgt_idx), self._device)
            # (each side with its own types: a blob column is descriptors in the target,
            # bytes in the source)
            names = ds.schema.names
            joined = pa.table(
                {
                    "target": pa.StructArray.from_arrays(
                        [matched_rows.column(n).combine_chunks() for n in names], names=names
                    ),
                    "source": pa.StructArray.from_arrays(
                        [source.column(n).combine_chunks().take(pa.array(src_idx)) for n in source.schema.names],
                        names=source.schema.names,
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
                unmatched &= _expr_mask(ds, scanned.addresses(np.arange(target.num_rows)), self._by_source_expr, self._device)
            delete_tgt = np.flatnonzero(unmatched)
        n_updated = int(act_tgt.size) if self._matched == "update" else 0
        n_deleted = int(delete_tgt.size) + (int(act_tgt.size) if self._matched == "delete" else 0)
        stats = {"num_inserted_rows": int(insert_src.size), "num_updated_rows": n_updated, "num_deleted_rows": n_deleted}
        gone = np.sort(np.concatenate([act_tgt, delete_tgt]).astype(np.int64))
        change = _RowChange(ds)
        if gone.size:
            change.delete_rows(*split_addresses(scanned.addresses(gone)))
        # as pylance writes them: the updated rows in target order, then the inserted rows in
        # source order (pylance's hash join keeps that order for single batches; over many
        # it interleaves them in its own way)
        write_src = np.concatenate([act_src, insert_src]) if self._matched == "update" else insert_src
        carried = created = None
        if _stable(ds) and write_src.size:
            # rewritten rows keep their stable ids and creation versions; inserted rows (no
            # id: u64::MAX marks them) get fresh ones at commit
            id_of_src = np.full(source.num_rows, _NO_ID, np.uint64)
            created_of_src: np.ndarray | None = np.zeros(source.num_rows, np.uint64)
            if self._matched == "update" and act_tgt.size:
                frag_ids, offsets = split_addresses(scanned.addresses(act_tgt))
                id_of_src[act_src] = _row_ids_at(ds, frag_ids, offsets)
                versions = _created_at(ds, frag_ids, offsets)
                if versions is None:
                    created_of_src = None
                else:
                    created_of_src[act_src] = versions  # type: ignore[index]
            carried = id_of_src[write_src]
            created = None if created_of_src is None else created_of_src[write_src]
        new_rows = source.take(pa.array(write_src)) if write_src.size else None
        if new_rows is not None and new_rows.num_columns < len(ds.schema.names):
            new_rows = self._fill_partial(ds, scanned, new_rows, act_tgt if self._matched == "update" else act_tgt[:0])
        return change.commit(new_rows, carried, created, publish=publish, stage_only=stage_only), stats, change

    def _fill_partial(self, ds: TableSnapshot, scanned: _Scanned, rows: pa.Table, updated_tgt: np.ndarray) -> pa.Table:
        """A partial-schema source's rows with the dataset's other columns: updated rows (the
        first ``updated_tgt.size``) keep their current values, inserted rows get nulls."""
        target_schema = _source_schema(ds)
        missing = [f for f in target_schema if f.name not in rows.schema.names]
        old = _read_at(ds, scanned.addresses(updated_tgt), self._device) if updated_tgt.size else None
        n_new = rows.num_rows - int(updated_tgt.size)
        cols = {}
        for f in missing:
            parts = [] if old is None else [old.column(f.name).combine_chunks().cast(f.type)]
            parts.append(pa.nulls(n_new, f.type))
            cols[f.name] = pa.concat_arrays(parts)
        arrays = [rows.column(f.name) if f.name in rows.schema.names else cols[f.name] for f in target_schema]
        return pa.table(arrays, schema=target_schema)


def _check_source(
    source: pa.Table, target_schema: pa.Schema, on: Sequence[str], keys_only: bool, inserts: bool
) -> pa.Table:
    """The merge_insert source as pylance accepts it, cast to the dataset's types.

    A merge that only deletes (``keys_only``) needs just the key columns (any castable
    type).  Otherwise the source's columns must be the dataset's (any order; a subset is a
    partial-schema source: updated rows keep their other columns, inserted rows get nulls,
    so with ``when_not_matched_insert_all`` the columns left out must be nullable) with
    exactly the dataset's types: a castable but different type (int32 for int64) is refused
    as pylance refuses it.  Refusals are :class:`IncompatibleSchemaError` (an ``OSError``
    like pylance's) before anything is written."""
    names = source.schema.names
    absent_keys = [k for k in on if k not in names]
    if absent_keys:
        raise IncompatibleSchemaError(f"merge_insert: the source lacks the key column(s) {absent_keys}")
    if keys_only:
        fields = [target_schema.field(k) for k in on]
        try:
            return source.select(list(on)).cast(pa.schema(fields)).combine_chunks()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise IncompatibleSchemaError(f"merge_insert: the source's keys cannot be compared with the dataset's: {exc}") from exc
    unexpected = [n for n in names if n not in target_schema.names]
    if unexpected or len(set(names)) != len(names):
        raise IncompatibleSchemaError(
            f"merge_insert: Append with different schema: the source has columns {names}, the dataset "
            f"{target_schema.names} (unexpected: {unexpected})"
        )
    for name in names:
        f, g = target_schema.field(name), source.schema.field(name)
        plain = not isinstance(f.type, pa.ExtensionType) and not isinstance(g.type, pa.ExtensionType)
        if plain and not (f.metadata or {}).get(b"lance-encoding:blob") and not g.type.equals(f.type):
            raise IncompatibleSchemaError(
                f"merge_insert: Append with different schema: {name!r} should have type {f.type} but type was {g.type}"
            )
    left_out = [f.name for f in target_schema if f.name not in names and not f.nullable]
    if inserts and left_out:
        raise IncompatibleSchemaError(
            f"merge_insert: Cannot insert rows with a partial-schema source: target column(s) {left_out} are non-nullable"
        )
    present = [f for f in target_schema if f.name in names]
    try:
        source = source.select([f.name for f in present]).cast(pa.schema(present))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise SchemaMismatchError(f"merge_insert: the source cannot be cast to the dataset's schema: {exc}") from exc
    return source.combine_chunks()


def _source_schema(ds: TableSnapshot) -> pa.Schema:
    """The schema a merge_insert source is cast to: the dataset's, except that a blob column
    (shown as pylance shows it: ``lance.blob.v2`` descriptors in 2.2, ``large_binary`` before)
    takes the blobs' bytes, ``large_binary`` marked ``lance-encoding:blob``, as the writer
    stores them (pylance's merge_insert takes the bytes too)."""
    blobs = {f.name: f for f in ds.lance_schema.fields if blob_kind(f)}
    schema = ds.schema
    for name, field in blobs.items():
        i = schema.get_field_index(name)
        schema = schema.set(i, pa.field(name, pa.large_binary(), field.nullable, metadata={BLOB_META_KEY: "true"}))
    return schema


def _match(target: pa.Table, source: pa.Table, on: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The matching (target row, source row) pairs on the key columns ``on``, target rows
    ascending; null keys never match.  A target row matched by more than one source row
    is refused (:class:`MergeInsertError`), as pylance refuses it."""
    if len(on) == 1:
        from lance_gpu.cpu.keyjoin import KeyTable, int_keys

        skeys = int_keys(source.column(on[0]))
        if skeys is not None:
            table = KeyTable(skeys)
            tgt_parts, src_parts = [], []
            base = 0
            for chunk in target.column(on[0]).chunks:  # one per fragment: no concatenated copy
                tkeys = int_keys(chunk)
                assert tkeys is not None  # the source was cast to the target's type
                tgt, src, ambiguous = table.probe(tkeys)
                if ambiguous >= 0:
                    _refuse_ambiguous(target, on, base + ambiguous)
                tgt_parts.append(tgt + base)
                src_parts.append(src)
                base += len(chunk)
            if not tgt_parts:
                return np.zeros(0, np.int64), np.zeros(0, np.int64)
            return np.concatenate(tgt_parts), np.concatenate(src_parts)
    keys = target.select(on).append_column(_TGT, pa.array(np.arange(target.num_rows, dtype=np.int64)))
    src_keys = source.select(on).append_column(_SRC, pa.array(np.arange(source.num_rows, dtype=np.int64)))
    valid_src = src_keys.filter(pc.invert(_any_null(src_keys, on)))
    if len(on) == 1:
        # a hash probe keeps only the target rows whose key is in the source: the join
        # then runs over the touched rows only (null keys are in no value set)
        keys = keys.filter(pc.is_in(keys.column(on[0]), value_set=valid_src.column(on[0]).combine_chunks()))
    else:
        keys = keys.filter(pc.invert(_any_null(keys, on)))
    pairs = keys.join(valid_src, keys=list(on), join_type="inner", use_threads=False)
    tgt_idx = pairs.column(_TGT).to_numpy()
    src_idx = pairs.column(_SRC).to_numpy()
    order = np.argsort(tgt_idx, kind="stable")
    tgt_idx, src_idx = tgt_idx[order], src_idx[order]
    repeated = np.flatnonzero(tgt_idx[1:] == tgt_idx[:-1])
    if repeated.size:
        _refuse_ambiguous(target, on, int(tgt_idx[repeated[0]]))
    return tgt_idx, src_idx


def _refuse_ambiguous(target: pa.Table, on: Sequence[str], row: int) -> None:
    keys = {k: target.column(k)[row].as_py() for k in on}
    raise MergeInsertError(
        "Ambiguous merge inserts are prohibited: multiple source rows match the same target row on "
        f"{keys}. Please ensure each target row is matched by at most one source row."
    )


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


def _expr_mask(ds: TableSnapshot, addresses: np.ndarray, predicate: str, device: str) -> np.ndarray:
    """Which of the rows at ``addresses`` satisfy ``predicate`` over the dataset's columns."""
    hit = scanner_for(ds, columns=[], filter=predicate, with_row_address=True, device=device).to_table().column(ROW_ADDR).to_numpy()
    return np.isin(addresses, hit)


# --------------------------------------------------------------------------------------------
# insert


def insert(ds: TableSnapshot, data: Any, *, mode: str = "append", **kwargs: Any) -> TableSnapshot:
    """``ds.insert(data, mode=)``: ``write_dataset(data, ds, mode=mode)``; returns the
    committed version's snapshot."""
    if mode not in ("append", "overwrite"):
        raise ValueError(f"insert: mode must be 'append' or 'overwrite', not {mode!r}")
    kwargs.setdefault("storage_options", ds.storage_options)
    return ds.checkout(write_version(data, ds.root, mode=mode, store=ds.store, **kwargs))
