# SPDX-License-Identifier: Apache-2.0
"""``ds.optimize.compact_files``: rewrite small fragments (and fragments with many deleted
rows) into bigger ones, deletions materialised, as pylance does.

Planning (pylance's ``plan_compaction``): fragments are visited in manifest order; one is a
candidate if more than ``materialize_deletions_threshold`` of its rows are deleted ("compact
itself") or it has fewer than ``target_rows_per_fragment`` physical rows ("compact with
neighbours").  Runs of adjacent candidates form bins; a bin of one fragment that only wants
neighbours is dropped; a bin is cut into tasks of at least ``target_rows_per_fragment`` live
rows (the remainder joins the last task).

Each task reads the live rows of its fragments in order and writes them with the dataset's
schema and file version into one new fragment (pylance 14 does not cut a task's output at
``target_rows_per_fragment``: two 600k-row fragments become one of 1.2M rows; only
``max_bytes_per_file`` starts another file).  The ids of all new fragments are reserved
with one ReserveFragments commit, then a single Rewrite transaction (read version: the
version compacted) replaces every task's old fragments with its new ones, at the old
fragments' position, then the fragments are sorted by id.

Indices, as pylance: a bin never mixes fragments covered by different sets of indices (an
indexed fragment is not compacted with an unindexed one).  Every index covering a rewritten
fragment is remapped to the new row addresses before the commit -- with stable row ids too,
as pylance 14 does (its btrees hold row addresses) -- and listed in the transaction's
``rewritten_indices`` (:mod:`lance_gpu.write.index_remap`: BTree indices; any other type is
refused before anything is written).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa

from lance_gpu._proto import table_pb2
from lance_gpu.errors import UnsupportedFeatureError
from lance_gpu.index.metadata import BITMAP_DETAILS, LABEL_LIST_DETAILS, VECTOR_DETAILS
from lance_gpu.progress import ProgressHook
from lance_gpu.scan import ReadUnit, decode_spans
from lance_gpu.table import features
from lance_gpu.table.indices import fragment_bitmap
from lance_gpu.table.manifest import ManifestFile, latest_version, read_manifest_file
from lance_gpu.table.rowids import encode_row_ids, encode_versions, read_fragment_versions
from lance_gpu.txn.commit import DEFAULT_COMMIT_LOCK, DEFAULT_CONFLICT_RETRIES, commit_file, run_with_retries
from lance_gpu.txn.operations import ReserveFragments, Rewrite
from lance_gpu.txn.publish import check_appendable
from lance_gpu.write.dataset_writer import DEFAULT_MAX_BYTES_PER_FILE, _humantime, _write_fragments, dataset_file_minor
from lance_gpu.write.index_remap import (
    RowAddressMap,
    check_remappable,
    remap_index,
)
from lance_gpu.write.indices import optimize_indices
from lance_gpu.write.operations import update_config

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable

    from pyroaring import BitMap

    from lance_gpu.table.snapshot import FragmentSnapshot, TableSnapshot

__all__ = ["CompactionMetrics", "DatasetOptimizer", "compact_files", "plan_compaction"]


@dataclass
class CompactionMetrics:
    """What :func:`compact_files` did, as pylance's ``lance.optimize.CompactionMetrics``:
    files count data files plus deletion files."""

    fragments_removed: int = 0
    fragments_added: int = 0
    files_removed: int = 0
    files_added: int = 0


def _files(frag: table_pb2.DataFragment) -> int:
    return len(frag.files) + (1 if frag.HasField("deletion_file") else 0)


class FragmentIds(Protocol):
    """The fragment ids an index covers, as :func:`plan_compaction` asks of them: membership
    of an id (a pyroaring ``BitMap``, a ``set``).  Not ``Container[int]``: ``BitMap`` takes
    only ints, ``Container`` any object."""

    def __contains__(self, fragment_id: int, /) -> bool: ...


def plan_compaction(
    fragments: Sequence[FragmentSnapshot],
    target_rows_per_fragment: int,
    materialize_deletions: bool = True,
    materialize_deletions_threshold: float = 0.1,
    excluded_fragment_ids: Sequence[int] = (),
    index_fragments: Sequence[FragmentIds] = (),
) -> list[list[FragmentSnapshot]]:
    """The tasks (lists of adjacent fragments) a compaction rewrites.  ``index_fragments``:
    the fragment ids each index of the dataset covers; a bin ends where that set changes."""
    if materialize_deletions and materialize_deletions_threshold >= 1.0:
        materialize_deletions = False
    excluded = {int(i) for i in excluded_fragment_ids}
    bins: list[tuple[list[FragmentSnapshot], list[bool], list[int]]] = []  # fragments, itself?, live rows
    current: tuple[list, list, list] | None = None
    current_key: tuple[int, ...] = ()
    for frag in fragments:
        physical = frag.physical_rows
        deleted = int(frag.pb.deletion_file.num_deleted_rows) if frag.pb.HasField("deletion_file") else 0
        if frag.pb.HasField("deletion_file") and not deleted:
            deleted = int(frag.deleted_rows.size)
        share = deleted / physical if physical else 0.0
        if frag.fragment_id in excluded:
            candidacy = None
        elif materialize_deletions and share > materialize_deletions_threshold:
            candidacy = True  # compact itself
        elif physical < target_rows_per_fragment:
            candidacy = False  # compact with neighbours
        else:
            candidacy = None
        if candidacy is None:
            if current is not None:
                bins.append(current)
                current = None
            continue
        key = tuple(k for k, covered in enumerate(index_fragments) if frag.fragment_id in covered)
        if current is not None and key != current_key:
            bins.append(current)
            current = None
        if current is None:
            current = ([], [], [])
            current_key = key
        current[0].append(frag)
        current[1].append(candidacy)
        current[2].append(physical - deleted)
    if current is not None:
        bins.append(current)

    tasks: list[list[FragmentSnapshot]] = []
    for frags, itself, rows in bins:
        if len(frags) == 1 and not itself[0]:
            continue
        # split into bins of at least target rows; a too-small remainder joins the last one
        while True:
            n = 0
            total = 0
            while total < target_rows_per_fragment and n < len(rows):
                total += rows[n]
                n += 1
            if sum(rows[n:]) >= target_rows_per_fragment:
                tasks.append(frags[:n])
                frags, rows = frags[n:], rows[n:]
            else:
                tasks.append(frags)
                break
    return [t for t in tasks if t]


#: Rows per batch compaction reads when ``batch_size`` is not given (pylance's default).
COMPACTION_BATCH_SIZE = 8192


#: A span of fragments is written as batches that cross fragment ends when the task's bytes
#: so far, times this, plus :data:`UNCUT_MARGIN_BYTES`, stay under ``max_bytes_per_file``: the
#: written pages of so few bytes cannot reach the cut, so no cut falls inside the span either way.
UNCUT_EXPANSION = 4
UNCUT_MARGIN_BYTES = 1 << 20


def _live_tables(ds: TableSnapshot, frags: Sequence[FragmentSnapshot], schema: pa.Schema,
                 batch_size: int | None, *, max_bytes_per_file: int) -> Iterator[pa.RecordBatch]:
    """The live rows of ``frags`` in order, every field as stored: small fragments decoded
    together (:func:`~lance_gpu.scan.decode_spans`), one fragment ahead otherwise; in batches
    of at most ``batch_size`` rows (:data:`COMPACTION_BATCH_SIZE` by default).

    The writer checks ``max_bytes_per_file`` between batches, and pylance's batches end at
    each fragment's end, so its file cuts fall at fragment ends: where a cut could fall
    inside a span, its batches end at every fragment's end too.  Where none can (the task's
    bytes so far far below the limit: :data:`UNCUT_EXPANSION`), the span's rows go out in
    whole batches across fragment ends -- the same files, one batch instead of one per tiny
    fragment."""
    fields = list(ds.lance_schema.fields)
    units = [ReadUnit(frag, frag.live_rows) for frag in frags]
    rows_per_batch = batch_size or COMPACTION_BATCH_SIZE
    seen = 0
    for group, table in decode_spans(ds, units, fields, physical=True, ahead=1):
        if not table.schema.equals(schema, check_metadata=False):
            table = table.cast(schema)
        seen += table.nbytes
        if len(group) > 1 and seen * UNCUT_EXPANSION + UNCUT_MARGIN_BYTES < max_bytes_per_file:
            yield from table.combine_chunks().to_batches(max_chunksize=rows_per_batch)
            continue
        # whole batches of batch_size rows (pylance's default read batch: 8192), not the
        # decoded pages' chunks, ending at each fragment's end (a span decodes several back
        # to back): the writer's file cuts fall between them, as pylance's
        start = 0
        for unit in group:
            rows = unit.fragment.physical_rows if unit.rows is None else len(unit.rows)
            piece = table.slice(start, rows)
            start += rows
            yield from piece.combine_chunks().to_batches(max_chunksize=rows_per_batch)


def compact_files(ds: TableSnapshot, *, conflict_retries: int = DEFAULT_CONFLICT_RETRIES,
                  **options: object) -> tuple[TableSnapshot, CompactionMetrics]:
    """Compact ``ds`` (see :func:`compact_once`), re-planned on the latest version after each
    retryable conflict (a concurrent delete, update or compaction of the same fragments), at
    most ``conflict_retries`` times, as pylance retries it.  Returns the snapshot of the
    version compacted into (after a retry with nothing left to compact: the latest one
    planned on) and the metrics."""
    first = [True]

    def attempt() -> tuple[TableSnapshot, CompactionMetrics]:
        target = ds if first[0] else ds.latest()
        first[0] = False
        return compact_once(target, **options)  # type: ignore[arg-type]

    return run_with_retries(attempt, conflict_retries)


def compact_once(
    ds: TableSnapshot,
    *,
    target_rows_per_fragment: int | None = None,
    max_rows_per_group: int | None = None,
    max_bytes_per_file: int | None = None,
    materialize_deletions: bool | None = None,
    materialize_deletions_threshold: float | None = None,
    defer_index_remap: bool | None = None,
    num_threads: int | None = None,
    batch_size: int | None = None,
    excluded_fragment_ids: Sequence[int] | None = None,
    progress: ProgressHook | None = None,
    **unsupported: object,
) -> tuple[TableSnapshot, CompactionMetrics]:
    """Compact ``ds`` (see the module docstring); returns the committed version's snapshot
    (``ds`` when nothing needed compacting) and the metrics.

    ``max_rows_per_group`` and ``num_threads`` are accepted and ignored (our writer picks its
    own pages); ``batch_size`` sets the rows read per batch, between which a new file starts
    once the pages written reach ``max_bytes_per_file`` (pylance's cuts); other pylance options are refused when set.  Indices
    are kept: BTree indices covering rewritten fragments are remapped (other index types
    make the compaction fail with :class:`UnsupportedFeatureError` before anything is
    written).  With stable row ids the new fragments carry the live rows' ids and created /
    last-updated versions, in order.  ``progress`` (a :data:`lance_gpu.progress.ProgressHook`)
    is told ``("fragments compacted", done, total)`` as each group of fragments is rewritten.
    """
    if unsupported.get("compaction_mode") == "reencode":  # what we do anyway
        unsupported.pop("compaction_mode")
    bad = sorted(k for k, v in unsupported.items() if v is not None)
    if bad:
        raise UnsupportedFeatureError(f"compact_files: options {bad} are not supported")
    if defer_index_remap:
        raise UnsupportedFeatureError("compact_files: defer_index_remap is not supported")
    target = int(target_rows_per_fragment or 1024 * 1024)
    if target < 1:
        raise ValueError("target_rows_per_fragment must be positive")
    base = ds.manifest_file
    check_appendable(base)
    store, root = ds.store, ds.root
    indices = list(base.index_section.indices) if base.index_section is not None else []
    bitmaps: list[BitMap] = []  # every index's, read before the first missing one raises
    for index, bitmap in zip(indices, [fragment_bitmap(index) for index in indices], strict=True):
        if bitmap is None:
            raise UnsupportedFeatureError(f"{ds.uri}: index {index.name!r} records no fragment bitmap")
        bitmaps.append(bitmap)
    tasks = plan_compaction(
        ds.fragments,
        target,
        True if materialize_deletions is None else bool(materialize_deletions),
        0.1 if materialize_deletions_threshold is None else float(materialize_deletions_threshold),
        excluded_fragment_ids or (),
        bitmaps,
    )
    metrics = CompactionMetrics()
    if not tasks:
        return ds, metrics
    stable = bool(int(base.manifest.writer_feature_flags) & features.FLAG_STABLE_ROW_IDS)
    rewritten_ids = {f.fragment_id for task in tasks for f in task}
    to_remap, moved = split_touched_indices(base, [i for i, b in zip(indices, bitmaps, strict=True) if rewritten_ids & set(b)])
    for index in to_remap:
        check_remappable(index, store.uri(root))

    schema = ds.lance_schema
    physical = schema.to_arrow(physical=True)
    minor = dataset_file_minor(ds.manifest)
    groups: list[tuple[list[table_pb2.DataFragment], list[table_pb2.DataFragment]]] = []
    rewrite = Rewrite()
    total_fragments = sum(len(task) for task in tasks)
    if progress is not None:
        progress("fragments compacted", 0, total_fragments)
    cut_bytes = int(max_bytes_per_file or DEFAULT_MAX_BYTES_PER_FILE)
    try:
        for task in tasks:
            new, written = _write_fragments(
                store, root, schema, physical, _live_tables(ds, task, physical, batch_size, max_bytes_per_file=cut_bytes), None, minor, 1 << 62,
                cut_bytes, size_of_flushed_pages=True,
            )
            rewrite.written.extend(written)
            if stable:
                _carry_row_ids(ds, task, new)
            old = [f.pb for f in task]
            groups.append((old, new))
            metrics.fragments_removed += len(old)
            metrics.fragments_added += len(new)
            metrics.files_removed += sum(_files(f) for f in old)
            metrics.files_added += sum(_files(f) for f in new)
            if progress is not None:
                progress("fragments compacted", metrics.fragments_removed, total_fragments)
        # on the version compacted, as pylance reserves them; then the Rewrite is rebased on
        # that ReserveFragments commit before its first attempt (it would lose that version)
        reserved = reserve_fragment_ids(ds, groups, ds.manifest_file)
        if to_remap:
            mapping = RowAddressMap.build(
                ([(f.fragment_id, f.physical_rows, f.live_rows) for f in task], new)
                for task, (_old, new) in zip(tasks, groups, strict=True)
            )
            for index in to_remap:
                new_uuid, files = remap_index(store, root, index, mapping, rewrite.written)
                rewrite.rewritten.append((index, new_uuid, files))
    except BaseException:
        rewrite.cleanup(store)
        raise
    rewrite.groups = groups
    rewrite.moved = {bytes(i.uuid.uuid) for i in moved}
    ours = [reserved] if reserved is not None and int(reserved.head.version) == ds.version + 1 else []
    committed = commit_file(store, root, rewrite, ds.manifest_file, ds.naming, known_since=ours)
    return ds.committed(committed), metrics


def _carry_row_ids(ds: TableSnapshot, old: Sequence[FragmentSnapshot], new: list[table_pb2.DataFragment]) -> None:
    """Stable row ids (and their created / last-updated versions) of the live rows of
    ``old``, in order, handed to the fragments ``new`` that now hold those rows."""
    def live(values: np.ndarray, frag: FragmentSnapshot) -> np.ndarray:
        rows = frag.live_rows
        return values if rows is None else values[rows]

    ids = np.concatenate([live(f.row_ids, f) for f in old]) if old else np.zeros(0, np.uint64)
    versions: dict[str, np.ndarray | None] = {}
    for which in ("created_at", "last_updated_at"):
        parts = [read_fragment_versions(ds.store, ds.root, f.pb, which) for f in old]
        present = [live(p, f) for p, f in zip(parts, old, strict=True) if p is not None]
        versions[which] = np.concatenate(present) if len(present) == len(parts) else None  # None: a fragment has none
    start = 0
    for frag in new:
        n = int(frag.physical_rows)
        frag.inline_row_ids = encode_row_ids(ids[start : start + n])
        if versions["created_at"] is not None:
            frag.inline_created_at_versions = encode_versions(versions["created_at"][start : start + n])
        if versions["last_updated_at"] is not None:
            frag.inline_last_updated_at_versions = encode_versions(versions["last_updated_at"][start : start + n])
        start += n
    if start != ids.size:
        raise AssertionError(f"compaction wrote {start} rows for {ids.size} row ids")


def split_touched_indices(base: ManifestFile, touched: list[table_pb2.IndexMetadata]) -> tuple[list, list]:
    """The indices covering rewritten fragments as (to remap, to move): pylance 14's btrees
    hold row addresses even with stable row ids, so they are always remapped; with stable row
    ids, indices of row ids (bitmaps, label lists, vector indices) stay valid, and pylance keeps
    their files and only moves their fragment bitmaps."""
    stable = bool(int(base.manifest.writer_feature_flags) & features.FLAG_STABLE_ROW_IDS)
    row_id_kinds = (BITMAP_DETAILS, LABEL_LIST_DETAILS, VECTOR_DETAILS)
    moved = [i for i in touched if stable and i.index_details.type_url in row_id_kinds]
    return [i for i in touched if i not in moved], moved


def reserve_fragment_ids(ds: TableSnapshot, groups: list[tuple[list, list[table_pb2.DataFragment]]],
                         base: ManifestFile | None = None) -> ManifestFile | None:
    """Number the new fragments of ``groups`` with ids reserved by one ReserveFragments commit
    on top of ``base`` (default: the latest version); returns that commit's manifest file
    (None when there is no new fragment and nothing was committed)."""
    n_new = sum(len(new) for _old, new in groups)
    if not n_new:
        return None
    reserved = commit_file(ds.store, ds.root, ReserveFragments(n_new), base if base is not None else _latest(ds), ds.naming)
    next_id = int(reserved.head.max_fragment_id) - n_new + 1  # (head: no parse of the fragments)
    for _old, new in groups:
        for frag in new:
            frag.id = next_id
            next_id += 1
    return reserved


def _latest(ds: TableSnapshot):
    return read_manifest_file(ds.store, latest_version(ds.store, ds.root).path)


class DatasetOptimizer:
    """``ds.optimize``, as pylance's ``lance.dataset.DatasetOptimizer``."""

    def __init__(self, ds: TableSnapshot, on_commit: Callable[[TableSnapshot], None] | None = None,
                 commit_lock: Any = None) -> None:
        self._ds = ds
        self._on_commit = on_commit
        self._commit_lock = commit_lock  # the dataset's commit_lock=, held around each commit

    @contextmanager
    def _locked(self) -> Iterator[None]:
        token = DEFAULT_COMMIT_LOCK.set(self._commit_lock) if self._commit_lock is not None else None
        try:
            yield
        finally:
            if token is not None:
                DEFAULT_COMMIT_LOCK.reset(token)

    def compact_files(self, **options: object) -> CompactionMetrics:
        """See :func:`compact_files`; the compacted version's snapshot goes to ``on_commit``."""
        with self._locked():
            compacted, metrics = compact_files(self._ds, **options)  # type: ignore[arg-type]
        if self._on_commit is not None and compacted is not self._ds:
            self._on_commit(compacted)
        return metrics

    def enable_auto_cleanup(self, config: dict[str, int]) -> None:
        """Clean old versions after commits (pylance's ``enable_auto_cleanup``): one
        UpdateConfig setting ``lance.auto_cleanup.interval`` / ``older_than``.

        Parameters
        ----------
        config : AutoCleanupConfig
            ``{"interval": versions, "older_than_seconds": seconds}``.
        """

        with self._locked():
            update_config(self._ds, config={
                "lance.auto_cleanup.interval": str(int(config["interval"])),
                "lance.auto_cleanup.older_than": _humantime(int(config["older_than_seconds"])),
            })

    def disable_auto_cleanup(self) -> None:
        """Stop cleaning after commits: one UpdateConfig removing the auto cleanup keys."""

        with self._locked():
            update_config(self._ds, config={"lance.auto_cleanup.interval": None, "lance.auto_cleanup.older_than": None})

    def optimize_indices(self, **kwargs: object) -> None:
        """See :func:`lance_gpu.write.indices.optimize_indices`; the committed version's
        snapshot goes to ``on_commit``."""
        with self._locked():
            committed = optimize_indices(self._ds, **kwargs)
        if self._on_commit is not None and committed is not self._ds:
            self._on_commit(committed)
