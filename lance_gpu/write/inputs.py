# SPDX-License-Identifier: Apache-2.0
"""Every input pylance's write API takes, as one Arrow schema and a stream of record batches.

:func:`coerce_input` accepts what ``lance.write_dataset`` accepts (``lance/types.py``
``_coerce_reader``): a pyarrow Table, RecordBatch, RecordBatchReader, ``pyarrow.dataset``
Dataset or Scanner (or a lance-gpu scanner), a Lance dataset (ours or pylance's), any ``__arrow_c_stream__`` object,
pandas, Polars and cuDF frames, a dict of columns (DLPack tensors in host memory among
them: a CPU torch tensor, ...), a list of dicts, or an iterable of RecordBatches.

Casting invariant: when a ``schema`` is given, every batch handed out has exactly that
schema.  A batch of other but castable types (int32 data under an int64 schema) is cast, as
pylance's ``_casting_recordbatch_iter`` does; one whose columns differ or whose values cannot
be cast raises :class:`~lance_gpu.errors.SchemaMismatchError`.  The first batch is pulled and
cast here, so a type that cannot be cast at all is refused before any file is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from lance_gpu.errors import SchemaMismatchError
from lance_gpu.file.writer._jsonb import text_to_jsonb
from lance_gpu.scan.scanner import LanceScanner
from lance_gpu.write.device_input import DeviceBatch, device_batches, device_stream, host_dlpack_column, is_device_input

__all__ = ["cast_batch", "cast_to_stored", "coerce_input"]

_CAST_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, ValueError, KeyError)


def _json_to_stored(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with its ``arrow.json`` columns encoded as JSONB where ``schema`` (a physical
    dataset schema) stores them as large_binary marked ``lance.json``."""
    for i, col in enumerate(batch.columns):
        name = batch.schema.field(i).name
        if getattr(col.type, "extension_name", None) != "arrow.json" or schema.get_field_index(name) < 0:
            continue
        target = schema.field(name)
        if (target.metadata or {}).get(b"ARROW:extension:name") == b"lance.json":
            stored = text_to_jsonb(col.storage, name)
            batch = batch.set_column(i, pa.field(name, stored.type, target.nullable, target.metadata), stored)
    return batch


def cast_to_stored(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` cast to the physical dataset ``schema`` (``LanceSchema.to_arrow(physical=True)``:
    what writers take), its ``arrow.json`` columns encoded as JSONB on the way (a plain
    cast would store their text).  Arrow cast errors propagate."""
    columns = []
    for target in schema:
        col = table.column(target.name)
        if getattr(col.type, "extension_name", None) == "arrow.json" and (target.metadata or {}).get(
            b"ARROW:extension:name"
        ) == b"lance.json":
            col = pa.chunked_array([text_to_jsonb(c.storage, target.name) for c in col.chunks], pa.large_binary())
        columns.append(col if col.type == target.type else col.cast(target.type))
    return pa.Table.from_arrays(columns, schema=schema)


def cast_batch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with exactly ``schema``: columns picked by name, then cast.

    Raises :class:`SchemaMismatchError` when a column is missing or extra, or a value cannot
    be cast (overflow, unparsable string, no cast kernel between the types).
    """
    batch = _json_to_stored(batch, schema)
    if batch.schema.equals(schema, check_metadata=False):
        if batch.schema.equals(schema, check_metadata=True):
            return batch
        return pa.RecordBatch.from_arrays(batch.columns, schema=schema)
    names = batch.schema.names
    if sorted(names) != sorted(schema.names) or len(set(names)) != len(names):
        raise SchemaMismatchError(
            f"data has columns {names}, the schema {schema.names}"
        )
    try:
        table = pa.Table.from_batches([batch])
        if names != schema.names:
            table = table.select(schema.names)
        out = table.cast(schema).combine_chunks()
    except _CAST_ERRORS as exc:
        raise SchemaMismatchError(
            f"data of schema\n{batch.schema}\ncannot be cast to the schema\n{schema}\n({exc})"
        ) from exc
    batches = out.to_batches()
    return batches[0] if batches else pa.RecordBatch.from_pylist([], schema=schema)


def _cast_stream(first: pa.RecordBatch, rest: Iterator[Any], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    yield first
    for batch in rest:
        if not isinstance(batch, pa.RecordBatch):
            raise TypeError(f"expected pyarrow.RecordBatch items, got {type(batch).__name__}")
        yield cast_batch(batch, schema)


def _frame_table(data: object, schema: pa.Schema | None) -> pa.Table | None:
    """pandas, Polars or cuDF frames as a Table (checked by module name: none is imported
    unless the data is one of its frames); None for anything else.

    A pandas frame converts as pylance converts it (``Table.from_pandas`` keeping its index):
    a RangeIndex is stored only in the schema's ``pandas`` metadata, any other index (a
    named one, say) as a column, so ``to_table().to_pandas()`` gives the frame back."""
    lib = type(data).__module__.split(".", 1)[0]
    if lib == "pandas" and type(data).__name__ == "DataFrame":
        return pa.Table.from_pandas(data, schema=schema)
    if lib == "cudf" and hasattr(data, "to_arrow"):  # writers without a GPU encoder
        return data.to_arrow(preserve_index=False)
    if lib == "polars" and type(data).__name__ == "DataFrame" and hasattr(data, "to_arrow"):
        return data.to_arrow()
    return None


def _as_stream(data: object, schema: pa.Schema | None) -> tuple[pa.Schema | None, Iterator[Any]]:
    """(the data's own schema if it has one, its batches), uncast."""
    import pyarrow.dataset as pds

    table = _frame_table(data, schema)
    if table is not None:
        return table.schema, iter(table.to_batches())
    if isinstance(data, pa.RecordBatch):
        return data.schema, iter([data])
    if isinstance(data, pa.Table):
        return data.schema, iter(data.to_batches())
    if isinstance(data, pa.RecordBatchReader):
        return data.schema, iter(data)
    if isinstance(data, pds.Dataset):  # pylance's LanceDataset is one too
        reader = pds.Scanner.from_dataset(data).to_reader() if type(data).__module__.startswith("pyarrow") else (
            data.scanner().to_reader()
        )
        return reader.schema, iter(reader)
    if isinstance(data, (pds.Scanner, LanceScanner)):  # ours: a scan of a lance-gpu dataset
        reader = data.to_reader()
        return reader.schema, iter(reader)
    if type(data).__module__ == "lance_gpu.dataset" and hasattr(data, "to_batches"):
        return data.schema, iter(data.to_batches())  # type: ignore[attr-defined]
    if isinstance(data, dict):
        columns = {k: host_dlpack_column(str(k), v) for k, v in data.items()}
        batch = pa.RecordBatch.from_pydict(columns, schema=schema)
        return batch.schema, iter([batch])
    if isinstance(data, list) and data and isinstance(data[0], dict):
        batch = pa.RecordBatch.from_pylist(data, schema=schema)
        return batch.schema, iter([batch])
    if hasattr(data, "__arrow_c_stream__"):
        reader = pa.RecordBatchReader.from_stream(data)
        return reader.schema, iter(reader)
    if isinstance(data, Iterable) and not isinstance(data, (str, bytes)):
        return None, iter(data)
    raise TypeError(
        "data must be a pyarrow Table, RecordBatch, RecordBatchReader, Dataset or Scanner, a Lance "
        "dataset, an __arrow_c_stream__ object, a pandas, Polars or cuDF DataFrame, a dict of columns, "
        f"a list of dicts or an iterable of RecordBatches, not {type(data).__name__}"
    )


def coerce_input(
    data: object, schema: pa.Schema | None = None, *, device: bool = False
) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """The schema of ``data`` (``schema`` when given) and an iterator of its batches, each
    of exactly that schema (see the module docstring for the casting rules).

    Data in device memory (a cuDF frame, a ``DeviceTable``, a dict of CUDA arrays: see
    :mod:`lance_gpu.write.device_input`) needs a usable GPU (else
    :class:`~lance_gpu.errors.GpuUnavailableError`); with ``device=True`` (writers with a
    GPU encoder) it stays there as :class:`~lance_gpu.write.device_input.DeviceBatch` es,
    otherwise it is copied to host batches."""
    if is_device_input(data) and (device or type(data).__module__.split(".", 1)[0] != "cudf"):
        target, dbatches = device_batches(data, schema)
        if device:
            return target, dbatches  # type: ignore[return-value]
        return target, (b.to_arrow() for b in dbatches)
    own, it = _as_stream(data, schema)
    target = schema if schema is not None else own
    try:
        first = next(it)
    except StopIteration:
        if target is None:
            raise ValueError("write got an empty iterable of batches and no schema") from None
        return target, iter(())
    if isinstance(first, DeviceBatch) or is_device_input(first):
        # a stream of device data (DeviceBatches, cuDF frames, device tables ...)
        target, stream = device_stream(first, it, target)
        if device:
            return target, stream  # type: ignore[return-value]
        return target, (b.to_arrow() for b in stream)
    if not isinstance(first, pa.RecordBatch):
        raise TypeError(f"expected pyarrow.RecordBatch items, got {type(first).__name__}")
    if target is None:
        target = first.schema
    return target, _cast_stream(cast_batch(first, target), it, target)
