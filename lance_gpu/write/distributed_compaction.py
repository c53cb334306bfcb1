# SPDX-License-Identifier: Apache-2.0
"""Distributed compaction (pylance's ``lance.optimize.Compaction``): plan on a driver, run
the tasks anywhere, commit the results once.

::

    plan = Compaction.plan(ds, {"target_rows_per_fragment": 400})      # driver
    results = [task.execute(ds) for task in plan.tasks]                  # workers (pickled)
    metrics = Compaction.commit(ds, results)                             # driver

* :meth:`Compaction.plan` groups fragments exactly as ``ds.optimize.compact_files`` does
  (:func:`~lance_gpu.write.compaction.plan_compaction`): a :class:`CompactionPlan` of
  :class:`CompactionTask` s, each the fragments (as they were at ``read_version``) of one
  group, with the options.
* :meth:`CompactionTask.execute` writes the live rows of its fragments, read at the plan's
  version, into new data files (nothing committed) and returns a :class:`RewriteResult`
  (old and new fragments, metrics); with stable row ids the new fragments carry the rows'
  ids and versions.
* :meth:`Compaction.commit` reserves the new fragments' ids (one ReserveFragments commit),
  remaps the BTree indices covering the old fragments and commits one Rewrite planned on
  the plan's version, so a concurrent change is rebased or refused by the Rewrite's
  conflict rules; the dataset object moves to the new version (two versions later, as
  pylance).

Plans, tasks and results pickle and round-trip through ``json()`` / ``from_json``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from lance_gpu.errors import InvalidArgumentError, UnsupportedFeatureError
from lance_gpu.io import join
from lance_gpu.table import features
from lance_gpu.table.indices import fragment_bitmap
from lance_gpu.txn.fragment import FragmentMetadata
from lance_gpu.txn.operations import Rewrite
from lance_gpu.txn.publish import check_appendable
from lance_gpu.write.compaction import (
    CompactionMetrics,
    FragmentIds,
    _carry_row_ids,
    _files,
    _live_tables,
    plan_compaction,
    reserve_fragment_ids,
    split_touched_indices,
)
from lance_gpu.write.dataset_writer import DEFAULT_MAX_BYTES_PER_FILE, _write_fragments, dataset_file_minor
from lance_gpu.write.index_remap import check_remappable, remap_index
from lance_gpu.write.operations import _commit
from lance_gpu.write.row_address_map import RowAddressMap

if TYPE_CHECKING:  # pragma: no cover
    from lance_gpu.dataset import LanceDataset
    from lance_gpu.table.snapshot import TableSnapshot

__all__ = ["Compaction", "CompactionMetrics", "CompactionPlan", "CompactionTask", "RewriteResult"]

#: compact_files options that only shape the plan (a task keeps the rest, batch_size among them, as pylance's).
_PLAN_ONLY = ("target_rows_per_fragment", "materialize_deletions", "materialize_deletions_threshold",
              "excluded_fragment_ids", "num_threads", "max_rows_per_group")


def _at(dataset: LanceDataset, version: int) -> TableSnapshot:
    """The snapshot of ``dataset`` at ``version`` (its own when it is at that version)."""
    snap = dataset.snapshot
    return snap if int(snap.version) == int(version) else snap.checkout(int(version))


def _frags_json(frags: list[FragmentMetadata]) -> list[dict[str, Any]]:
    return [f.to_json() for f in frags]


def _frags_from(items: list[dict[str, Any]]) -> list[FragmentMetadata]:
    return [FragmentMetadata.from_json(json.dumps(d)) for d in items]


@dataclass
class RewriteResult:
    """What one task wrote: ``original_fragments`` (as read) replaced by ``new_fragments``
    (id 0 until the commit numbers them)."""

    read_version: int
    metrics: CompactionMetrics
    original_fragments: list[FragmentMetadata]
    new_fragments: list[FragmentMetadata]

    @property
    def old_fragments(self) -> list[FragmentMetadata]:
        return self.original_fragments

    def __repr__(self) -> str:
        return (f"RewriteResult(read_version={self.read_version}, new_fragments={self.new_fragments!r}, "
                f"old_fragments={self.original_fragments!r})")

    def json(self) -> str:
        """This result as JSON text."""
        return json.dumps({"read_version": self.read_version, "metrics": asdict(self.metrics),
                           "original_fragments": _frags_json(self.original_fragments),
                           "new_fragments": _frags_json(self.new_fragments)})

    @staticmethod
    def from_json(text: str) -> RewriteResult:
        """A result from :meth:`json` text.

        Parameters
        ----------
        text : str
            What :meth:`json` returned.
        """
        d = json.loads(text)
        return RewriteResult(int(d["read_version"]), CompactionMetrics(**d["metrics"]),
                             _frags_from(d["original_fragments"]), _frags_from(d["new_fragments"]))


@dataclass
class CompactionTask:
    """One group of fragments to rewrite into new ones."""

    read_version: int
    fragments: list[FragmentMetadata]
    options: dict[str, Any] = field(default_factory=dict)

    def execute(self, dataset: LanceDataset) -> RewriteResult:
        """Write this task's rows into new data files (not committed).

        Parameters
        ----------
        dataset : LanceDataset
            The dataset (any version of it: the task reads its own ``read_version``).
        """
        ds = _at(dataset, self.read_version)
        check_appendable(ds.manifest_file)
        by_id = {f.fragment_id: f for f in ds.fragments}
        missing = [f.id for f in self.fragments if f.id not in by_id]
        if missing:
            raise InvalidArgumentError(f"compaction task: fragments {missing} are not in version {self.read_version}")
        frags = [by_id[f.id] for f in self.fragments]
        schema = ds.lance_schema
        physical = schema.to_arrow(physical=True)
        minor = dataset_file_minor(ds.manifest)
        size = int(self.options.get("max_bytes_per_file") or DEFAULT_MAX_BYTES_PER_FILE)
        batches = _live_tables(ds, frags, physical, self.options.get("batch_size"), max_bytes_per_file=size)
        new, _written = _write_fragments(ds.store, ds.root, schema, physical, batches, None, minor, 1 << 62, size,
                                         size_of_flushed_pages=True)
        if int(ds.manifest.writer_feature_flags) & features.FLAG_STABLE_ROW_IDS:
            _carry_row_ids(ds, frags, new)
        old = [f.pb for f in frags]
        metrics = CompactionMetrics(len(old), len(new), sum(_files(f) for f in old), sum(_files(f) for f in new))
        return RewriteResult(self.read_version, metrics, [FragmentMetadata.from_pb(f) for f in old],
                             [FragmentMetadata.from_pb(f) for f in new])

    def json(self) -> str:
        """This task as JSON text."""
        return json.dumps({"read_version": self.read_version, "fragments": _frags_json(self.fragments),
                           "options": self.options})

    @staticmethod
    def from_json(text: str) -> CompactionTask:
        """A task from :meth:`json` text.

        Parameters
        ----------
        text : str
            What :meth:`json` returned.
        """
        d = json.loads(text)
        return CompactionTask(int(d["read_version"]), _frags_from(d["fragments"]), dict(d.get("options") or {}))


@dataclass
class CompactionPlan:
    """The tasks of one compaction, planned on ``read_version``."""

    read_version: int
    tasks: list[CompactionTask]

    def num_tasks(self) -> int:
        """How many tasks."""
        return len(self.tasks)

    def __repr__(self) -> str:
        return f"CompactionPlan(read_version={self.read_version}, tasks=<{len(self.tasks)} compaction tasks>)"

    def json(self) -> str:
        """This plan as JSON text."""
        return json.dumps({"read_version": self.read_version, "tasks": [json.loads(t.json()) for t in self.tasks]})

    @staticmethod
    def from_json(text: str) -> CompactionPlan:
        """A plan from :meth:`json` text.

        Parameters
        ----------
        text : str
            What :meth:`json` returned.
        """
        d = json.loads(text)
        return CompactionPlan(int(d["read_version"]), [CompactionTask.from_json(json.dumps(t)) for t in d["tasks"]])


class Compaction:
    """pylance's ``lance.optimize.Compaction``: :meth:`plan`, :meth:`execute`, :meth:`commit`."""

    @staticmethod
    def execute(dataset: LanceDataset, options: dict[str, Any] | None = None) -> CompactionMetrics:
        """Plan, run and commit in this process (``ds.optimize.compact_files(**options)``).

        Parameters
        ----------
        dataset : LanceDataset
            The dataset to compact.
        options : dict, optional
            ``compact_files`` options.
        """
        return dataset.optimize.compact_files(**dict(options or {}))

    @staticmethod
    def plan(dataset: LanceDataset, options: dict[str, Any] | None = None) -> CompactionPlan:
        """The tasks a compaction of ``dataset`` (at its version) would run.

        Parameters
        ----------
        dataset : LanceDataset
            The dataset to compact.
        options : dict, optional
            ``compact_files`` options (``target_rows_per_fragment``, ``max_bytes_per_file``,
            ``materialize_deletions``, ``materialize_deletions_threshold``...).
        """
        opts = {k: v for k, v in dict(options or {}).items() if v is not None}
        if opts.pop("defer_index_remap", None):
            raise UnsupportedFeatureError("Compaction.plan: defer_index_remap is not supported")
        target = int(opts.get("target_rows_per_fragment") or 1024 * 1024)
        if target < 1:
            raise InvalidArgumentError("target_rows_per_fragment must be positive")
        snap = dataset.snapshot
        base = snap.manifest_file
        indices = list(base.index_section.indices) if base.index_section is not None else []
        bitmaps: list[FragmentIds] = [fragment_bitmap(index) or set() for index in indices]
        groups = plan_compaction(
            snap.fragments, target, bool(opts.get("materialize_deletions", True)),
            float(opts.get("materialize_deletions_threshold", 0.1)), opts.get("excluded_fragment_ids") or (), bitmaps,
        )
        task_options = {k: v for k, v in opts.items() if k not in _PLAN_ONLY}
        version = int(snap.version)
        return CompactionPlan(
            version, [CompactionTask(version, [FragmentMetadata.from_pb(f.pb) for f in g], dict(task_options)) for g in groups]
        )

    @staticmethod
    def commit(dataset: LanceDataset, rewrites: list[RewriteResult], options: dict[str, Any] | None = None) -> CompactionMetrics:
        """Commit the tasks' results as one Rewrite (after a ReserveFragments for the new
        ids); ``dataset`` moves to the new version.

        Parameters
        ----------
        dataset : LanceDataset
            The dataset compacted.
        rewrites : list of RewriteResult
            What the tasks returned (all planned on one version).
        options : dict, optional
            Accepted for compatibility.
        """
        metrics = CompactionMetrics()
        if not rewrites:
            return metrics
        versions = {int(r.read_version) for r in rewrites}
        if len(versions) != 1:
            raise InvalidArgumentError(f"Compaction.commit: the results were planned on different versions {sorted(versions)}")
        ds = _at(dataset, versions.pop())
        store, root = ds.store, ds.root
        groups = [([f.to_pb() for f in r.original_fragments], [f.to_pb() for f in r.new_fragments]) for r in rewrites]
        rewrite = Rewrite()
        rewrite.written.extend(join(root, "data", df.path) for _old, new in groups for frag in new for df in frag.files)
        base = ds.manifest_file
        indices = list(base.index_section.indices) if base.index_section is not None else []
        rewritten_ids = {int(f.id) for old, _new in groups for f in old}
        to_remap = [i for i in indices if rewritten_ids & set(fragment_bitmap(i) or ())]
        to_remap, moved = split_touched_indices(base, to_remap)  # as compact_files
        try:
            for index in to_remap:
                check_remappable(index, store.uri(root))
            reserve_fragment_ids(ds, groups)
            if to_remap:
                by_id = {f.fragment_id: f for f in ds.fragments}
                mapping = RowAddressMap.build(
                    ([(int(f.id), by_id[int(f.id)].physical_rows, by_id[int(f.id)].live_rows) for f in old], new)
                    for old, new in groups
                )
                for index in to_remap:
                    new_uuid, files = remap_index(store, root, index, mapping, rewrite.written)
                    rewrite.rewritten.append((index, new_uuid, files))
        except BaseException:
            rewrite.cleanup(store)
            raise
        rewrite.groups = groups
        rewrite.moved = {bytes(i.uuid.uuid) for i in moved}
        manifest = _commit(ds, rewrite)
        for r in rewrites:
            for name in ("fragments_removed", "fragments_added", "files_removed", "files_added"):
                setattr(metrics, name, getattr(metrics, name) + getattr(r.metrics, name))
        dataset.reload(int(manifest.version))
        return metrics
