# SPDX-License-Identifier: Apache-2.0
"""Arrow batches to torch tensors: the rules, in one place.

===========================================  =============================================
column type                                  tensor
===========================================  =============================================
int / uint / float / half                    1-D tensor of that dtype (uint64 -> int64
                                             unless ``uint64_as_int64=False``)
bool                                         1-D ``torch.bool``
date / time / timestamp / duration           1-D integer tensor of the storage (days, units
                                             since the epoch)
``lance.bfloat16``                           1-D ``torch.bfloat16`` (the 2 bytes reinterpreted)
fixed_size_list of the above (nested too)    ``[rows, d1, d2, ...]``
``arrow.fixed_shape_tensor``                 ``[rows, *shape]`` (row-major storage)
string / binary (large, view too)            a Python ``list`` of ``str`` / ``bytes``
anything else (lists, structs, maps)         ``NoTensorRuleError`` (a ``TypeError`` and a
                                             ``ValueError``) naming the column
===========================================  =============================================

``decode={"image": fn}`` replaces the rule for a column: ``fn(pyarrow.Array)`` may return
anything (decoded images, token ids...).

**Nulls** (``nulls=``): ``"raise"`` (default) raises :class:`NullValueError` naming the column;
``"mask"`` fills null slots (NaN for floating types, 0 / False otherwise) and adds a
``"<column>_valid"`` bool tensor (True where the row is not null; for fixed-size lists the
row is null, null items inside a valid row count as null rows too).

Fixed-width columns without nulls become tensors that *share* the Arrow buffers (no copy).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from lance_gpu.errors import LanceGpuError

BF16 = "lance.bfloat16"
NULL_RULES = ("raise", "mask")


class NullValueError(LanceGpuError, ValueError):
    """A column holds nulls and the null rule is ``"raise"``."""


class NoTensorRuleError(LanceGpuError, TypeError, ValueError):
    """A column's type has no tensor rule (lists, structs, maps) and no decode hook: a
    ``TypeError``, and a ``ValueError`` as pylance's loader raises for such columns."""


def _ext_name(t: pa.DataType, meta: Mapping[bytes, bytes] | None) -> str | None:
    if isinstance(t, pa.BaseExtensionType):
        return t.extension_name
    if meta:
        name = meta.get(b"ARROW:extension:name")
        return name.decode() if name else None
    return None


def _storage(arr: pa.Array) -> pa.Array:
    return arr.storage if isinstance(arr, pa.ExtensionArray) else arr


# Arrow buffers are read-only to NumPy and the tensors share them (documented above): torch's
# warning about it is silenced for this module's conversions.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning)


def _from_numpy(values: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(values)


def _flat_values(arr: pa.Array) -> tuple[np.ndarray, tuple[int, ...], np.ndarray | None, pa.DataType]:
    """``(values, row shape, row validity or None, leaf type)`` of a fixed-width column;
    nested fixed-size lists flatten into extra dimensions."""
    arr = _storage(arr)
    shape: list[int] = []
    valid = None if arr.null_count == 0 else np.asarray(arr.is_valid().to_numpy(zero_copy_only=False))
    n = len(arr)
    while pa.types.is_fixed_size_list(arr.type):
        d = arr.type.list_size
        inner = _storage(arr.values.slice(arr.offset * d, len(arr) * d))
        if inner.null_count:
            # a null item makes its whole (top-level) row null under the mask rule
            item_valid = np.asarray(inner.is_valid().to_numpy(zero_copy_only=False), np.bool_)
            row_valid = np.asarray(item_valid.reshape(n, -1).all(axis=1) if n else np.zeros(0, np.bool_), np.bool_)
            valid = row_valid if valid is None else np.asarray(valid & row_valid)
        shape.append(d)
        arr = inner
    leaf = arr.type
    return _leaf_numpy(arr), tuple(shape), valid, leaf


def _leaf_numpy(arr: pa.Array) -> np.ndarray:
    t = arr.type
    if pa.types.is_boolean(t):
        return np.asarray(arr.to_numpy(zero_copy_only=False), np.bool_)
    if pa.types.is_fixed_size_binary(t) and t.byte_width == 2:  # bfloat16 storage
        buf = arr.buffers()[1]
        return np.frombuffer(buf, np.uint16, count=len(arr), offset=arr.offset * 2)
    if pa.types.is_temporal(t):
        width = t.bit_width
        arr = arr.view(pa.int64() if width == 64 else pa.int32())
    buf = arr.buffers()[1]
    dtype = np.dtype(arr.type.to_pandas_dtype())
    if buf is None:
        return np.zeros(len(arr), dtype)
    return np.frombuffer(buf, dtype, count=len(arr), offset=arr.offset * dtype.itemsize)


def _is_fixed_leaf(t: pa.DataType, ext: str | None) -> bool:
    if ext == BF16:
        return True
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_temporal(t)


def _fixed_column(arr: pa.Array, meta) -> bool:
    t = _storage(arr).type if isinstance(arr, pa.ExtensionArray) else arr.type
    ext = _ext_name(arr.type, meta)
    while pa.types.is_fixed_size_list(t):
        item = t.value_field
        ext = _ext_name(item.type, item.metadata) or ext
        t = item.type.storage_type if isinstance(item.type, pa.BaseExtensionType) else item.type
    if ext == BF16:
        return True
    return _is_fixed_leaf(t, None)


def _bf16_leaf(arr: pa.Array, meta) -> bool:
    t, ext = arr.type, _ext_name(arr.type, meta)
    while True:
        if ext == BF16:
            return True
        s = t.storage_type if isinstance(t, pa.BaseExtensionType) else t
        if not pa.types.is_fixed_size_list(s):
            return False
        item = s.value_field
        t, ext = item.type, _ext_name(item.type, item.metadata)


def is_text(t: pa.DataType, meta: Mapping[bytes, bytes] | None) -> bool:
    """Strings and binary (not the 2-byte storage of bfloat16): converted to Python lists."""
    s = t.storage_type if isinstance(t, pa.BaseExtensionType) else t
    if pa.types.is_fixed_size_binary(s):
        return _ext_name(t, meta) != BF16
    checks = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary, pa.types.is_large_binary, pa.types.is_string_view, pa.types.is_binary_view)
    return any(check(s) for check in checks)


@functools.lru_cache(maxsize=256)
def _fast_layout(t: pa.DataType, bf16: bool) -> tuple[int, np.dtype, tuple[int, ...]] | None:
    """``(fixed-size list depth, leaf dtype, row shape)`` of a plain numeric column or nested
    fixed-size lists of one (no extension types inside), else None (the general path)."""
    shape: list[int] = []
    while pa.types.is_fixed_size_list(t):
        shape.append(t.list_size)
        t = t.value_type
    if isinstance(t, pa.BaseExtensionType):
        return None
    if bf16:
        if not (pa.types.is_fixed_size_binary(t) and t.byte_width == 2 and not shape):
            return None
        return 0, np.dtype(np.uint16), ()
    if not (pa.types.is_integer(t) or pa.types.is_floating(t)):
        return None
    return len(shape), np.dtype(t.to_pandas_dtype()), tuple(shape)


def _fast(arr: pa.Array, t: pa.DataType, bf16: bool, uint64_as_int64: bool) -> torch.Tensor | None:
    """The zero-copy tensor of a null-free plain numeric (or fixed-size list) column, or None."""
    try:
        layout = _fast_layout(t, bf16)
    except TypeError:  # an unhashable (extension) type somewhere inside
        return None
    return None if layout is None else _fast_tensor(arr, layout, bf16, uint64_as_int64)


def _fast_tensor(arr: pa.Array, layout: tuple[int, np.dtype, tuple[int, ...]], bf16: bool, uint64_as_int64: bool) -> torch.Tensor | None:
    """:func:`_fast` for a column whose :func:`_fast_layout` is ``layout``."""
    depth, dtype, shape = layout
    leaf = arr
    for _ in range(depth):
        d = leaf.type.list_size
        leaf = leaf.values.slice(leaf.offset * d, len(leaf) * d)
    if leaf.null_count:
        return None
    buf = leaf.buffers()[1]
    if buf is None:
        return None
    tensor = torch.from_numpy(np.frombuffer(buf, dtype, count=len(leaf), offset=leaf.offset * dtype.itemsize))
    if bf16:
        tensor = tensor.view(torch.bfloat16)
    elif uint64_as_int64 and tensor.dtype == torch.uint64:
        tensor = tensor.view(torch.int64)
    return tensor.reshape(len(arr), *shape) if shape else tensor


#: ``(name, metadata, storage?, fast layout or None, bfloat16?, fixed_shape_tensor shape or None)``
#: per field: what :func:`to_tensor` needs to know of a schema before it sees a column.
_FieldPlan = tuple[str, Any, bool, tuple[int, np.dtype, tuple[int, ...]] | None, bool, tuple[int, ...] | None]


def _field_plan(field: pa.Field) -> _FieldPlan:
    t = field.type
    try:
        if isinstance(t, pa.FixedShapeTensorType):
            return field.name, field.metadata, True, _fast_layout(t.storage_type, False), False, tuple(int(x) for x in t.shape)
        bf16 = _ext_name(t, field.metadata) == BF16
        return field.name, field.metadata, False, _fast_layout(t, bf16), bf16, None
    except TypeError:  # an unhashable (extension) type somewhere inside
        return field.name, field.metadata, False, None, False, None


_last_plan: tuple[pa.Schema, list[_FieldPlan]] | None = None


def _schema_plan(schema: pa.Schema) -> list[_FieldPlan]:
    """The field plans of ``schema``; the last schema's are kept (a feed converts batch after
    batch of one schema: hashing a schema costs more than comparing it with the last)."""
    global _last_plan
    last = _last_plan
    if last is not None and (last[0] is schema or last[0] == schema):
        return last[1]
    plan = [_field_plan(f) for f in schema]
    _last_plan = (schema, plan)
    return plan


def column_to_tensor(
    name: str,
    arr: pa.Array | pa.ChunkedArray,
    *,
    meta: Mapping[bytes, bytes] | None = None,
    nulls: str = "raise",
    uint64_as_int64: bool = True,
) -> tuple[Any, torch.Tensor | None]:
    """``(converted column, validity tensor or None)`` under the rules of this module."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    t = arr.type
    if isinstance(t, pa.FixedShapeTensorType) and arr.null_count == 0:
        tensor = _fast(arr.storage, t.storage_type, False, uint64_as_int64)
        if tensor is not None:
            return tensor.reshape(len(arr), *(int(x) for x in t.shape)), None
    elif arr.null_count == 0:
        tensor = _fast(arr, t, _ext_name(t, meta) == BF16, uint64_as_int64)
        if tensor is not None:
            return tensor, None
    if is_text(t, meta):
        if arr.null_count and nulls == "raise":
            raise NullValueError(f"column {name!r} holds {arr.null_count} nulls (nulls='raise'); use nulls='mask' or a decode hook")
        text_valid = _from_numpy(np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), np.bool_)) if arr.null_count else None
        return _storage(arr).to_pylist(), text_valid
    if not _fixed_column(arr, meta):
        raise NoTensorRuleError(f"column {name!r} of type {t} has no tensor rule; pass decode={{{name!r}: fn}} to convert it")
    values, shape, valid, _leaf = _flat_values(arr)
    if _bf16_leaf(arr, meta):
        tensor = _from_numpy(values).view(torch.bfloat16)
    else:
        tensor = _from_numpy(values)
        if uint64_as_int64 and tensor.dtype == torch.uint64:
            tensor = tensor.view(torch.int64)
    if isinstance(t, pa.FixedShapeTensorType):
        shape = tuple(int(x) for x in t.shape)
    tensor = tensor.reshape(len(arr), *shape)
    if valid is None:
        return tensor, None
    if nulls == "raise":
        raise NullValueError(f"column {name!r} holds {int((~valid).sum())} null rows (nulls='raise'); use nulls='mask'")
    tensor = tensor.clone()
    fill = float("nan") if tensor.is_floating_point() else 0
    tensor[torch.from_numpy(~valid)] = fill
    return tensor, torch.from_numpy(valid.copy())


def to_tensor(
    batch: pa.RecordBatch | dict[str, Any],
    *,
    hf_converter: dict | None = None,
    use_blob_api: bool = False,
    uint64_as_int64: bool = True,
    nulls: str = "raise",
    decode: Mapping[str, Callable[[pa.Array], Any]] | None = None,
    **kwargs: Any,
) -> dict[str, Any] | torch.Tensor:
    """Convert a batch to tensors (pylance's ``to_tensor_fn`` signature, plus our options).

    Parameters
    ----------
    batch : pyarrow.RecordBatch or dict of str to pyarrow.Array
        The rows to convert.
    hf_converter : dict, optional
        Accepted for pylance compatibility; ignored.
    use_blob_api : bool, default False
        Accepted for pylance compatibility; blob columns arrive as binary.
    uint64_as_int64 : bool, default True
        Reinterpret uint64 as int64, as pylance does.
    nulls : {"raise", "mask"}, default "raise"
        The null rule of the module docstring.
    decode : dict of str to callable, optional
        Per-column hooks ``fn(pyarrow.Array) -> object`` replacing the rules.

    Returns
    -------
    dict of str to Tensor (or list), or a lone Tensor when the batch has one column and no
    validity mask was added (as pylance).
    """
    if nulls not in NULL_RULES:
        raise ValueError(f"nulls must be one of {NULL_RULES}, not {nulls!r}")
    decode = decode or {}
    columns: Iterable[tuple[_FieldPlan, Any]]
    if isinstance(batch, pa.RecordBatch):
        # the schema's field plans take null-free fixed-width columns straight to tensors
        columns = zip(_schema_plan(batch.schema), batch.columns, strict=True)
    elif isinstance(batch, pa.Table):
        columns = (((f.name, f.metadata, False, None, False, None), col) for f, col in zip(batch.schema, batch.columns, strict=True))
    else:
        columns = (((name, None, False, None, False, None), arr) for name, arr in batch.items())
    out: dict[str, Any] = {}
    for (name, meta, storage, layout, bf16, shape), arr in columns:
        if name in decode:
            out[name] = decode[name](arr)
            continue
        if layout is not None and arr.null_count == 0:
            tensor = _fast_tensor(arr.storage if storage else arr, layout, bf16, uint64_as_int64)
            if tensor is not None:
                out[name] = tensor.reshape(len(arr), *shape) if shape is not None else tensor
                continue
        value, valid = column_to_tensor(name, arr, meta=meta, nulls=nulls, uint64_as_int64=uint64_as_int64)
        out[name] = value
        if valid is not None:
            out[f"{name}_valid"] = valid
    if len(out) == 1:
        return next(iter(out.values()))
    return out
