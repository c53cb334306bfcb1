# SPDX-License-Identifier: Apache-2.0
"""The GPU feed: fragments decoded into device memory, handed to torch by DLPack, batched on
the device.

A producer thread decodes this rank's fragments with the GPU reader (its memory budget and
staging apply: ``lance_gpu.gpu.set_memory_limit``) and wraps every column as a torch tensor
*without a copy* (``torch.from_dlpack`` of the decoded buffer) under a side CUDA stream; an
event recorded there is waited on by the consumer's stream before use, and each tensor is
``record_stream``-ed onto it so the caching allocator cannot recycle it early.  At most
``prefetch`` decoded fragments wait in the queue; the one being batched is the only other
device memory held.  Batches are slices (views) of the fragment's tensors, or, shuffled,
``index_select``-ed through a seeded ``torch.randperm`` (rows mix within a fragment plus the
carried-over rows of the previous one).

Tensor rules are :mod:`lance_gpu.torch.tensors`'s: numeric and boolean columns 1-D,
fixed-size lists / fixed-shape tensors N-D, bfloat16 reinterpreted, strings and binary as
Python lists (copied to the host), the same null rule (the validity stays on the device).
Columns the GPU reader decoded on the CPU arrive as host Arrow and are uploaded.

Under the numba CUDA simulator (tests), device buffers are host memory and torch is the CPU
build: the same plumbing runs with a copy out of the simulator in place of DLPack.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from lance_gpu.errors import UnsupportedFeatureError
from lance_gpu.torch._source import ROW_ID
from lance_gpu.torch.sampler import ShardedBatchSampler
from lance_gpu.torch.tensors import (
    BF16,
    NULL_RULES,
    NullValueError,
    _ext_name,
    column_to_tensor,
    is_text,
    to_tensor,
)

_DONE = object()


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
        valid = _device_view(col.validity, n).view(torch.bool)
        tensor = tensor.clone()
        tensor[~valid] = float("nan") if tensor.is_floating_point() else 0
        out = {name: tensor, f"{name}_valid": valid}
    return out


def _fragment_tensors(dt, names: list[str], metas: dict, nulls: str, device: torch.device, with_row_id: bool) -> dict[str, Any]:
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


def _length(fragment: dict[str, Any]) -> int:
    return len(next(iter(fragment.values()))) if fragment else 0


def device_batches(lds) -> Iterator[Any]:
    """The batches of this rank and worker of ``lds`` (a :class:`LanceDataset`) as tensors
    on the GPU (dict, or a lone tensor for one column, as the host path)."""
    if lds.nulls not in NULL_RULES:
        raise ValueError(f"nulls must be one of {NULL_RULES}, not {lds.nulls!r}")
    if lds._to_tensor_fn is not None and lds._to_tensor_fn is not to_tensor:
        raise UnsupportedFeatureError("a custom to_tensor_fn converts host Arrow batches: use device='cpu' with it")
    sampler = lds.resolved_sampler()
    if isinstance(sampler, ShardedBatchSampler) or not hasattr(sampler, "plan"):
        raise UnsupportedFeatureError("the GPU feed reads whole fragments: use the fragment or full-scan sampler, or device='cpu'")
    source = lds._source
    plan = sampler.plan(source, lds.batch_size)
    positions = [r.pos for r in plan.reads]
    schema = source.ds.schema
    names = list(source.columns)
    metas = {f.name: f.metadata for f in schema if f.name in names}
    device = _torch_device()
    gen = torch.Generator().manual_seed(int(lds._rng().integers(2**62)))
    stream = _prefetched(source, positions, names, metas, lds, device)
    pending: list[dict[str, Any]] = []
    have = 0
    bs = lds.batch_size
    for fragment in stream:
        n = _length(fragment)
        if not n:
            continue
        pending.append(fragment)
        have += n
        merged = {k: _cat([p[k] for p in pending]) for k in pending[0]}
        if lds.shuffle:
            order = torch.randperm(have, generator=gen)
            merged = {k: _rows(v, order.to(device) if isinstance(v, torch.Tensor) else order) for k, v in merged.items()}
        full = (have // bs) * bs
        for i in range(0, full, bs):
            yield _single({k: _rows(v, slice(i, i + bs)) for k, v in merged.items()})
        rest = {k: _rows(v, slice(full, have)) for k, v in merged.items()}
        pending, have = ([rest], have - full) if have > full else ([], 0)
    if have and not lds.drop_last:
        yield _single(pending[0])


def _single(batch: dict[str, Any]) -> Any:
    return next(iter(batch.values())) if len(batch) == 1 else batch


def _prefetched(source, positions: list[int], names: list[str], metas: dict, lds, device: torch.device) -> Iterator[dict[str, Any]]:
    """Fragments as tensor dicts, decoded and wrapped in a thread on a side stream, at most
    ``lds.prefetch`` ahead."""
    q: queue.Queue = queue.Queue(maxsize=max(1, lds.prefetch))
    stop = threading.Event()
    cuda = torch.cuda.is_available()
    side = torch.cuda.Stream() if cuda else None

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            ctx = torch.cuda.stream(side) if side is not None else contextlib.nullcontext()
            with ctx:
                for dt in source.device_tables(positions):
                    tensors = _fragment_tensors(dt, names, metas, lds.nulls, device, source.with_row_id)
                    event = None
                    if side is not None:
                        event = torch.cuda.Event()
                        event.record(side)
                    if not put((tensors, event)):
                        return
            put(_DONE)
        except BaseException as exc:
            put(exc)

    worker = threading.Thread(target=produce, daemon=True, name="lance-gpu-torch-device-prefetch")
    worker.start()
    try:
        while True:
            item = q.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            tensors, event = item
            if event is not None:
                current = torch.cuda.current_stream()
                current.wait_event(event)
                for v in tensors.values():
                    if isinstance(v, torch.Tensor) and v.is_cuda:
                        v.record_stream(current)
            yield tensors
    finally:
        stop.set()
        worker.join()
