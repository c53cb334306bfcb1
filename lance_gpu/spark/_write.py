# SPDX-License-Identifier: Apache-2.0
"""``df.write.format("lance").mode("append" | "overwrite").save(uri)``.

Protocol (Spark's ``DataSourceArrowWriter``):

1. ``writer(schema, overwrite)`` runs on the driver: it reads the dataset's latest version
   (if any), checks that the DataFrame fits it (append) and fixes the Arrow schema and file
   format every task writes in. Everything it decides is plain data in a :class:`WritePlan`.
2. ``write(batches)`` runs in each task: lance_gpu's file writer writes the task's rows
   into new data files under ``data/`` (invisible to readers: no manifest names them) and
   returns their fragment metadata as a :class:`LanceCommitMessage`.
3. ``commit(messages)`` runs once on the driver: one Lance transaction (``Append`` or
   ``Overwrite``) on top of the version read in step 1, through lance_gpu's commit layer
   (an append that races another append is rebased; other races raise
   :class:`~lance_gpu.errors.CommitConflictError`). If the commit fails, the new files are
   deleted.
4. ``abort(messages)`` (some task failed) deletes the files of the tasks that finished; a
   failing task deletes its own partial files.

Spark's save modes map to ``overwrite=True`` (``overwrite``) and ``False`` (everything else,
``append`` included). An append to a path without a dataset creates it.

Option ``device`` (``cpu`` | ``gpu`` | ``auto``, default ``cpu``): where each task encodes its
pages.  A task's rows reach Python as host Arrow (with or without the RAPIDS Accelerator);
with ``gpu`` each conformed batch is uploaded (:func:`~lance_gpu.write.device_input.upload_arrow`)
and the pages are encoded on the task's GPU (the device chosen as the reader chooses it,
holding one of its slots while the task writes), giving the CPU encoder's bytes; without a
usable GPU ``gpu`` raises :class:`~lance_gpu.errors.GpuUnavailableError` in the task and
``auto`` encodes on the CPU.  The choice is made in each task, where the GPU is.  Whether
the upload pays for itself is measured on a GPU (``benchmarks/bench_gpu_write.py``); until
then the default stays the CPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import cast

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from lance_gpu._device import gpu_unusable_reason, resolve_device
from lance_gpu._proto import table_pb2
from lance_gpu.errors import SchemaMismatchError, UnsupportedFeatureError
from lance_gpu.gpu import _array
from lance_gpu.io import ObjectStore, join, resolve
from lance_gpu.io.store import remove_quietly
from lance_gpu.spark._options import (
    WRITE_OPTIONS,
    LanceSparkOptionError,
    _positive_int,
    check_known,
    require_path,
    storage_options,
)
from lance_gpu.spark._types import spark_arrow_schema, to_spark_type
from lance_gpu.table.features import check_writer_flags
from lance_gpu.table.manifest import NamingScheme, read_manifest_file, resolve_manifest
from lance_gpu.table.schema import LanceSchema
from lance_gpu.txn.commit import commit
from lance_gpu.txn.operations import LanceOperation, Operation
from lance_gpu.txn.publish import SUPPORTED_WRITER_FLAGS, check_appendable, latest
from lance_gpu.write import dataset_writer
from lance_gpu.write.device_input import DeviceBatch, upload_arrow

__all__ = ["LanceCommitMessage", "LanceWriter", "WritePlan", "make_writer"]


@dataclass(frozen=True)
class WritePlan:
    """What every task writes and what the driver commits (picklable)."""

    root: str  # the dataset URI
    overwrite: bool
    read_version: int | None  # the version the write is based on; None: no dataset yet
    naming: NamingScheme
    arrow_schema: pa.Schema  # the schema of the files (the dataset's, for an append)
    minor: int  # data storage version 2.<minor> (-1: legacy 0.1)
    max_rows_per_file: int
    max_bytes_per_file: int
    storage_options: tuple[tuple[str, str], ...] = ()
    device: str = "cpu"  # where tasks encode: cpu | gpu | auto

    def store(self) -> tuple[ObjectStore, str]:
        """The dataset's store and root key (resolved where it runs: driver or executor)."""
        return resolve(self.root, dict(self.storage_options))


@dataclass
class LanceCommitMessage(WriterCommitMessage):
    """One task's output: its new fragments (serialized ``DataFragment``s, no ids yet)
    and the names of the data files it wrote (for ``abort``)."""

    fragments: list[bytes] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    rows: int = 0


def _ours(messages: list[WriterCommitMessage | None]) -> list[LanceCommitMessage | None]:
    """The messages Spark hands :meth:`LanceWriter.commit` / ``abort``: what this writer's
    ``write`` returned, one per task (None for a task that returned none), so all of them
    are :class:`LanceCommitMessage` objects (pyspark types them as their base class)."""
    return cast(list[LanceCommitMessage | None], messages)


def _dataset_writer():  # noqa: ANN202 - a module
    """lance_gpu's dataset writer (imported lazily: it may be absent in a partial build)."""

    return dataset_writer


def _base(plan: WritePlan):  # noqa: ANN202 - ManifestFile | None
    if plan.read_version is None:
        return None
    store, root = plan.store()
    return read_manifest_file(store, resolve_manifest(store, root, plan.read_version).path)


def _lance_schema(plan: WritePlan, base) -> LanceSchema:  # noqa: ANN001
    if base is not None and not plan.overwrite:
        return LanceSchema.from_manifest(base.manifest, base.path)
    return LanceSchema.from_arrow(plan.arrow_schema)


def _append_schema(base, incoming: StructType) -> pa.Schema:  # noqa: ANN001
    """The dataset's Arrow schema, after checking that Spark rows of ``incoming`` fit it."""
    target = LanceSchema.from_manifest(base.manifest, base.path).to_arrow(physical=True)
    if sorted(incoming.names) != sorted(target.names):
        msg = f"the DataFrame has columns {incoming.names}, the dataset has {target.names}"
        raise SchemaMismatchError(msg)
    spark_types = {f.name: f.dataType for f in incoming.fields}
    spark_arrow = spark_arrow_schema(incoming)
    for f in target:
        try:
            ours = to_spark_type(f, f.name)
        except UnsupportedFeatureError as exc:
            msg = f"cannot append to column {f.name!r} from Spark: {exc}"
            raise SchemaMismatchError(msg) from None
        if ours != spark_types[f.name]:
            msg = (
                f"column {f.name!r} is {ours.simpleString()} in Spark's view of the dataset ({f.type}), "
                f"the DataFrame has {spark_types[f.name].simpleString()}"
            )
            raise SchemaMismatchError(msg)
        given = spark_arrow.field(f.name).type
        try:
            pa.array([], given).cast(f.type)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            msg = f"column {f.name!r}: Spark's {given} cannot be stored as the dataset's {f.type}: {exc}"
            raise SchemaMismatchError(msg) from None
    return target


def make_writer(options: Mapping[str, str], schema: StructType, overwrite: bool) -> LanceWriter:
    """Plan a write on the driver (``DataSource.writer``)."""
    check_known(options, WRITE_OPTIONS, "write")
    dw = _dataset_writer()

    path = require_path(options)
    device = str(options.get("device", "cpu")).strip().lower()
    if device not in ("cpu", "gpu", "auto"):
        msg = f"option 'device' must be one of ('cpu', 'gpu', 'auto'), not {options.get('device')!r}"
        raise LanceSparkOptionError(msg)
    storage = storage_options(options)
    store, root = resolve(path, dict(storage))
    base, naming = latest(store, root)
    version_opt = options.get("data_storage_version")
    if base is not None and not overwrite:
        if version_opt is not None:
            msg = "option 'data_storage_version' applies to new datasets and overwrites, not appends"
            raise LanceSparkOptionError(msg)
        check_appendable(base)
        arrow_schema = _append_schema(base, schema)
        minor = dw.dataset_file_minor(base.manifest)
    else:
        if base is not None:
            check_writer_flags(base.manifest.writer_feature_flags, base.path, SUPPORTED_WRITER_FLAGS)
        arrow_schema = spark_arrow_schema(schema)
        minor = dw._minor_of(version_opt)
        dw._check_types(LanceSchema.from_arrow(arrow_schema), minor)
    plan = WritePlan(
        root=path,
        overwrite=bool(overwrite),
        read_version=None if base is None else int(base.manifest.version),
        naming=naming,
        arrow_schema=arrow_schema,
        minor=minor,
        max_rows_per_file=_positive_int(options, "max_rows_per_file", dw.DEFAULT_MAX_ROWS_PER_FILE),
        max_bytes_per_file=dw.DEFAULT_MAX_BYTES_PER_FILE,
        storage_options=storage,
        device=device,
    )
    return LanceWriter(plan)


def task_encoder(choice: str) -> str:
    """Where this task encodes ("gpu" or "cpu") for the ``device`` option: ``auto`` is the
    GPU when one is usable here (quietly the CPU otherwise), ``gpu`` raises
    :class:`~lance_gpu.errors.GpuUnavailableError` without one."""

    if choice == "auto":
        return "gpu" if gpu_unusable_reason() is None else "cpu"
    return resolve_device(choice)


def _current_device(ordinal: int) -> contextlib.AbstractContextManager:
    """Make ``ordinal`` CuPy's current CUDA device for the block (nothing to do where CuPy
    is not in use: the CUDA simulator)."""

    cp = _array.cupy()
    return contextlib.nullcontext() if cp is None else cp.cuda.Device(ordinal)


def _uploaded(batches: Iterator[pa.RecordBatch], schema: pa.Schema) -> Iterator[object]:
    """Each host batch uploaded to the device, as the device writer takes it."""

    for batch in batches:
        cols = [upload_arrow(batch.column(i), f.name) for i, f in enumerate(schema)]
        yield DeviceBatch(schema, cols, batch.num_rows)


class LanceWriter(DataSourceArrowWriter):
    """Writes data files per task, commits them once on the driver."""

    def __init__(self, plan: WritePlan) -> None:
        self.plan = plan

    def _conform(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        target = self.plan.arrow_schema
        for batch in batches:
            if batch.num_rows == 0:
                continue
            cols = []
            for f in target:
                col = batch.column(f.name)
                cols.append(col if col.type == f.type else col.cast(f.type))
            yield pa.RecordBatch.from_arrays(cols, schema=target)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LanceCommitMessage:
        plan = self.plan
        schema = _lance_schema(plan, _base(plan))
        store, root = plan.store()
        batches: Iterator = self._conform(iterator)

        def write_files() -> tuple[list, list[str]]:
            return _dataset_writer()._write_fragments(
                store,
                root,
                schema,
                plan.arrow_schema,
                batches,
                None,
                plan.minor,
                plan.max_rows_per_file,
                plan.max_bytes_per_file,
            )

        if task_encoder(plan.device) == "gpu" and plan.minor >= 1:  # 2.0 files have no device encoder
            from lance_gpu.spark._gpu import decode_slot, task_gpu

            batches = _uploaded(batches, plan.arrow_schema)
            ordinal, key = task_gpu()
            with decode_slot(key), _current_device(ordinal):
                fragments, written = write_files()
        else:
            fragments, written = write_files()
        return LanceCommitMessage(
            fragments=[f.SerializeToString() for f in fragments],
            files=[p.rsplit("/", 1)[-1] for p in written],
            rows=sum(int(f.physical_rows) for f in fragments),
        )

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:

        plan = self.plan
        base = _base(plan)
        fragments = [table_pb2.DataFragment.FromString(raw) for m in _ours(messages) if m is not None for raw in m.fragments]
        if base is not None and not plan.overwrite:
            op: Operation = LanceOperation.Append(fragments)
        else:
            op = LanceOperation.Overwrite(_lance_schema(plan, base), fragments, data_storage_version=_dataset_writer().storage_version_name(plan.minor))
        try:
            store, root = plan.store()
            commit(store, root, op, base, plan.naming)
        except BaseException:
            self.abort(messages)
            raise

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        store, root = self.plan.store()
        remove_quietly(
            store, [join(root, "data", name) for m in _ours(messages) if m is not None for name in m.files]
        )
