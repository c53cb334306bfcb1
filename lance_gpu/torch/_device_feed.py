# SPDX-License-Identifier: Apache-2.0
"""The GPU feed: a :class:`~lance_gpu.torch._pipeline.Feed`'s reads decoded into device
memory, handed to torch by DLPack, batched on the device.

Reads: whole fragments (fragment and full-scan samplers, and a filtered batch sampler) are
scanned whole; a batch sampler's row ranges are grouped into windows of ``read_rows`` rows
whose rows are one row selection per fragment (:meth:`RowSource.device_tables`: a scan plan
with those selections run by the GPU executor).  A producer thread
(:func:`~lance_gpu.torch._pipeline.in_background`, entered into a side CUDA stream) decodes
them with the GPU reader (its memory budget and staging apply: ``lance_gpu.gpu.set_memory_limit``,
``LANCE_GPU_MEMORY_LIMIT``, and a thread-local ``memory_limit`` of the consuming thread, which
the producer enters too) and wraps every column as a torch tensor *without a copy*
(``torch.from_dlpack`` of the decoded buffer); an event recorded there is waited on by the
consumer's stream before use, and each tensor is ``record_stream``-ed onto it so the caching
allocator cannot recycle it early.  At most ``prefetch`` decoded windows wait in the queue.

Batching follows the host pipeline's rules: every ``stride``'s row of a filtered batch
sampler; without a shuffle buffer, batches are slices (views) of the reads, a flush (a batch
sampler's range) ending a batch; with one, ``shuffle_buffer`` rows are permuted on the device
by a seeded ``torch.randperm`` and cut into batches (the rest carried into the next buffer).

A custom ``to_tensor_fn`` (or decode hooks, or ``to_tensor_fn=None``) gets what pylance gives
it, a host ``pyarrow.RecordBatch``: the reads decoded on the GPU are copied to the host as
Arrow, batched by the host pipeline's :func:`~lance_gpu.torch._pipeline.batches_of`, converted
there, and the tensors it returns are moved to the device.

Tensor rules are :mod:`lance_gpu.torch.tensors`'s: numeric and boolean columns 1-D,
fixed-size lists / fixed-shape tensors N-D, bfloat16 reinterpreted, strings and binary as
Python lists (copied to the host), the same null rule (the validity stays on the device).
Columns the GPU reader decoded on the CPU arrive as host Arrow and are uploaded.

Under the numba CUDA simulator (tests), device buffers are host memory and torch is the CPU
build: the same plumbing runs with a copy out of the simulator in place of DLPack.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from lance_gpu.gpu.memory import memory_limit, thread_limit
from lance_gpu.torch._pipeline import Feed, batches_of, cut, in_background, split_reads, strided
from lance_gpu.torch._plan import Read
from lance_gpu.torch._source import ROW_ID
from lance_gpu.torch.tensors import (
    BF16,
    NULL_RULES,
    NullValueError,
    _ext_name,
    column_to_tensor,
    is_text,
)


def _torch_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def _leaf_layout(t: pa.DataType, meta) -> tuple[torch.dtype, tuple[int, ...], bool]:
    """``(element dtype, row shape, bfloat16?)`` of a fixed-width column type."""
    ext = _ext_name(t, meta)
    shape: list[int] = []
    if isinstance(t, pa.FixedShapeTensorType):
        shape = [int(x) for x in t.shape]
    s = t.storage_type if isinstance(t, pa.BaseExtensionType) else t
    while pa.types.is_fixed_size_list(s):
        if not isinstance(t, pa.FixedShapeTensorType):
            shape.append(s.list_size)
        item = s.value_field
        ext = _ext_name(item.type, item.metadata) or ext
        s = item.type.storage_type if isinstance(item.type, pa.BaseExtensionType) else item.type
    if ext == BF16 or (pa.types.is_fixed_size_binary(s) and s.byte_width == 2 and ext == BF16):
        return torch.bfloat16, tuple(shape), True
    if pa.types.is_boolean(s):
        return torch.bool, tuple(shape), False
    if pa.types.is_temporal(s):
        return (torch.int64 if s.bit_width == 64 else torch.int32), tuple(shape), False
    if pa.types.is_integer(s) or pa.types.is_floating(s):
        np_dtype = np.dtype(s.to_pandas_dtype())
        return torch.from_numpy(np.zeros(0, np_dtype)).dtype, tuple(shape), False
    raise TypeError(f"no tensor rule for {t}")


def _device_view(buf, nbytes: int) -> torch.Tensor:
    """Bytes ``[0, nbytes)`` of a decoded device buffer as a uint8 torch tensor, no copy
    (DLPack); under the simulator a host copy of the simulated buffer."""
    raw = buf[:nbytes]
    if torch.cuda.is_available():
        import cupy

        return torch.from_dlpack(cupy.asarray(raw))
    return torch.from_numpy(np.ascontiguousarray(raw.copy_to_host()))


def column_tensors(name: str, col: Any, meta, nulls: str, device: torch.device) -> dict[str, Any]:
    """One decoded column (``DeviceColumn`` or host ``pyarrow.Array``) as ``{name: tensor}``
    (plus ``name_valid`` under ``nulls="mask"``)."""
    if isinstance(col, pa.Array | pa.ChunkedArray):
        value, valid = column_to_tensor(name, col, meta=meta, nulls=nulls)
        out = {name: value.to(device) if isinstance(value, torch.Tensor) else value}
        if valid is not None:
            out[f"{name}_valid"] = valid.to(device)
        return out
    t = col.type
    if is_text(t, meta):
        value, valid = column_to_tensor(name, col.to_arrow(), meta=meta, nulls=nulls)
        out = {name: value}
        if valid is not None:
            out[f"{name}_valid"] = valid.to(device)
        return out
    try:
        dtype, shape, _bf16 = _leaf_layout(t, meta)
    except TypeError:
        raise TypeError(f"column {name!r} of type {t} has no tensor rule on the device; use device='cpu' with decode=") from None
    n = len(col)
    per_row = int(np.prod(shape)) if shape else 1
    elem = torch.empty(0, dtype=dtype).element_size()
    if dtype is torch.bool:
        data = _device_view(col.data, n * per_row).view(torch.bool)
    else:
        data = _device_view(col.data, n * per_row * elem).view(torch.uint16 if dtype is torch.bfloat16 else dtype)
        if dtype is torch.bfloat16:
            data = data.view(torch.bfloat16)
    tensor = data.reshape(n, *shape)
    out = {name: tensor}
    if col.validity is not None and col.null_count:
        if nulls == "raise":
            raise NullValueError(f"column {name!r} holds {col.null_count} nulls (nulls='raise'); use nulls='mask'")
        valid = _device_view(col.validity.bytes(), n).view(torch.bool)
        tensor = tensor.clone()
        tensor[~valid] = float("nan") if tensor.is_floating_point() else 0
        out = {name: tensor, f"{name}_valid": valid}
    return out


def _table_tensors(dt, names: list[str], metas: dict, nulls: str, device: torch.device, with_row_id: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in names:
        out.update(column_tensors(name, dt.column(name), metas.get(name), nulls, device))
    if with_row_id:
        ids = np.asarray(dt.row_ids, np.uint64).view(np.int64)
        out[ROW_ID] = torch.from_numpy(ids.copy()).to(device)
    return out


def _rows(value: Any, index: torch.Tensor | slice) -> Any:
    if isinstance(value, torch.Tensor):
        return value[index]
    if isinstance(index, slice):
        return value[index]
    return [value[i] for i in index.tolist()]


def _cat(parts: list[Any]) -> Any:
    if isinstance(parts[0], torch.Tensor):
        return parts[0] if len(parts) == 1 else torch.cat(parts)
    return [v for p in parts for v in p]


def _length(rows: dict[str, Any]) -> int:
    return len(next(iter(rows.values()))) if rows else 0


def _single(batch: dict[str, Any]) -> Any:
    return next(iter(batch.values())) if len(batch) == 1 else batch


def _windows(feed: Feed) -> Iterator[list[Read]]:
    """The feed's reads in reading order, grouped: a whole-fragment read alone, a batch
    sampler's ranges in windows of at most ``read_rows`` rows (consecutive reads)."""
    counts = [n for _fid, n in feed.source.fragments()]
    # whole fragments stay whole (a shuffled read order permutes them)
    reads = split_reads(feed.plan.reads, max(counts, default=1) or 1, feed.rng if feed.shuffle_reads else None)
    window: list[Read] = []
    rows = 0
    for r in reads:
        whole = r.start == 0 and r.stop == counts[r.pos]
        if window and (whole or rows + r.stop - r.start > feed.read_rows):
            yield window
            window, rows = [], 0
        window.append(r)
        rows += r.stop - r.start
        if whole:
            yield window
            window, rows = [], 0
    if window:
        yield window


def _decoded(feed: Feed, window: list[Read], wrap: Callable[[Any], Any], cut: Callable[[Any, int, int], Any]) -> list[tuple[Any, bool]]:
    """``(rows, flush)`` per read of ``window``, in window order: one device scan of the
    window's fragments (each read's rows one selection), each table wrapped by ``wrap``
    (tensors or host Arrow), each read ``cut`` out of its fragment's (in row order)."""
    source = feed.source
    counts = [n for _fid, n in source.fragments()]
    by_pos: dict[int, list[int]] = {}
    for i, r in enumerate(window):
        by_pos.setdefault(r.pos, []).append(i)
    selections: list[tuple[int, np.ndarray | None]] = []
    for pos, members in by_pos.items():
        members.sort(key=lambda i: window[i].start)
        if len(members) == 1 and window[members[0]].start == 0 and window[members[0]].stop == counts[pos]:
            selections.append((pos, None))
        else:
            if source.filtered:  # a filtered plan reads whole fragments only
                raise AssertionError("row ranges of a filtered read")
            selections.append((pos, np.concatenate([np.arange(window[i].start, window[i].stop, dtype=np.int64) for i in members])))
    out: list[tuple[Any, bool]] = [(None, False)] * len(window)
    for (pos, _rows_sel), dt in zip(selections, source.device_tables(selections), strict=True):
        table = wrap(dt)
        at = 0
        for i in by_pos[pos]:
            r = window[i]
            n = dt.num_rows if _rows_sel is None else r.stop - r.start
            out[i] = (cut(table, at, n), r.flush)
            at += n
    return out


def device_batches(feed: Feed) -> Iterator[Any]:
    """The batches of ``feed`` (one rank and worker) decoded on the GPU: tensors on the
    device (a dict, or a lone tensor for one column, as the host path), or, with a custom
    conversion, what it returns, moved to the device."""
    if feed.nulls not in NULL_RULES:
        raise ValueError(f"nulls must be one of {NULL_RULES}, not {feed.nulls!r}")
    source = feed.source
    device = _torch_device()
    side = torch.cuda.Stream() if torch.cuda.is_available() else None

    # the producer thread decodes on the side stream, within the budget this thread reads with
    # (a ``memory_limit`` entered around the loop is thread-local: it is carried over)
    limit = thread_limit()

    @contextlib.contextmanager
    def on_side_stream() -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            if side is not None:
                stack.enter_context(torch.cuda.stream(side))
            if limit is not None:
                stack.enter_context(memory_limit(limit))
            yield

    if not feed.tensor_rules:
        arrow = _arrow_reads(feed, on_side_stream)
        for batch in batches_of(
            arrow, feed.plan.stride, batch_size=feed.batch_size, drop_last=feed.drop_last,
            shuffle_buffer=feed.shuffle_buffer, rng=feed.rng, fragment_edges=feed.fragment_edges,
        ):
            yield batch if feed.convert is None else _to_device(feed.convert(batch), device)
        return
    names = list(source.columns)
    metas = {f.name: f.metadata for f in source.ds.schema if f.name in names}

    def tensors(dt) -> dict[str, Any]:
        return _table_tensors(dt, names, metas, feed.nulls, device, source.with_row_id)

    def produce() -> Iterator[tuple[list[tuple[dict[str, Any], bool]], Any]]:
        for window in _windows(feed):
            reads = _decoded(feed, window, tensors, lambda t, a, n: {k: _rows(v, slice(a, a + n)) for k, v in t.items()})
            event = None
            if side is not None:
                event = torch.cuda.Event()
                event.record(side)
            yield reads, event

    def landed() -> Iterator[tuple[dict[str, Any], bool]]:
        for reads, event in in_background(produce(), max(1, feed.prefetch), "lance-gpu-torch-device-prefetch", context=on_side_stream):
            if event is not None:
                current = torch.cuda.current_stream()
                current.wait_event(event)
                for rows, _flush in reads:
                    for v in rows.values():
                        if isinstance(v, torch.Tensor) and v.is_cuda:
                            v.record_stream(current)
            yield from reads

    stream: Iterator[tuple[dict[str, Any], bool]] = landed()
    if feed.plan.stride is not None:
        stream = strided(stream, feed.plan.stride, _length, _every)
    if feed.shuffle_buffer > 0 and feed.rng is not None:
        gen = torch.Generator().manual_seed(int(feed.rng.integers(2**62)))
        yield from _shuffled(stream, feed, gen, device)
    else:
        yield from _in_order(stream, feed)


def _arrow_reads(feed: Feed, on_side_stream: Callable[[], contextlib.AbstractContextManager]) -> Iterator[tuple[pa.Table, bool]]:
    """The feed's reads decoded on the GPU and copied to the host as Arrow (for a custom
    conversion, which takes what pylance gives it), in reading order."""

    def produce() -> Iterator[list[tuple[pa.Table, bool]]]:
        for window in _windows(feed):
            yield _decoded(feed, window, lambda dt: dt.to_arrow(), lambda t, a, n: t.slice(a, n))

    for reads in in_background(produce(), max(1, feed.prefetch), "lance-gpu-torch-device-prefetch", context=on_side_stream):
        yield from reads


def _to_device(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=True)
    if isinstance(value, dict):
        return {k: _to_device(v, device) for k, v in value.items()}
    if isinstance(value, list | tuple) and value and all(isinstance(v, torch.Tensor) for v in value):
        return type(value)(_to_device(v, device) for v in value)
    return value


def _every(rows: dict[str, Any], offset: int, step: int) -> dict[str, Any]:
    return {k: v[offset::step] for k, v in rows.items()}


def _in_order(stream: Iterator[tuple[dict[str, Any], bool]], feed: Feed) -> Iterator[Any]:
    """Batches cut in reading order (views of the reads; one straddling two is concatenated);
    a flush ends a batch (with ``feed.fragment_edges``, as :func:`cut` says)."""
    for pieces in cut(stream, feed.batch_size, feed.drop_last, _length, fragment_edges=feed.fragment_edges):
        yield _single({k: _cat([_rows(rows[k], slice(a, b)) for rows, a, b in pieces]) for k in pieces[0][0]})


def _shuffled(stream: Iterator[tuple[dict[str, Any], bool]], feed: Feed, gen: torch.Generator, device: torch.device) -> Iterator[Any]:
    """Fill a buffer of ``shuffle_buffer`` rows, permute it on the device, hand out full
    batches; the rows left over (fewer than a batch) join the next buffer."""
    bs = feed.batch_size
    pending: list[dict[str, Any]] = []
    have = 0

    def drain() -> Iterator[Any]:
        nonlocal pending, have
        merged = {k: _cat([p[k] for p in pending]) for k in pending[0]}
        order = torch.randperm(have, generator=gen)
        merged = {k: _rows(v, order.to(device) if isinstance(v, torch.Tensor) else order) for k, v in merged.items()}
        full = (have // bs) * bs
        for i in range(0, full, bs):
            yield _single({k: _rows(v, slice(i, i + bs)) for k, v in merged.items()})
        rest = {k: _rows(v, slice(full, have)) for k, v in merged.items()}
        pending, have = ([rest], have - full) if have > full else ([], 0)

    for rows, _flush in stream:
        n = _length(rows)
        if not n:
            continue
        pending.append(rows)
        have += n
        if have >= feed.shuffle_buffer:
            yield from drain()
    if have:
        yield from drain()
    if have and not feed.drop_last:
        yield _single(pending[0])
