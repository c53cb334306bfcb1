# SPDX-License-Identifier: Apache-2.0
"""Shredding: one top-level Arrow array into its leaf columns with rep/def levels.

Every schema node on the path from a top-level field to a leaf is one rep/def layer, listed
inner-most first: the leaf and every struct an item layer, a list / large_list / map a list
layer (a map's ``entries`` struct an item layer).  Fixed-size lists are values of their
leaf, not layers; null items inside them are not levels either but item validity stored
with the values (see :func:`fsl_layers`).  Levels are built by
:func:`cuda_kernels.levels.ravel_levels`, which reproduces what Lance's ``RepDefBuilder``
writes; layer kinds follow the data (a nullable field without nulls in a page is an
``ALL_VALID`` layer there, as pylance writes it).

A leaf's *visible* values are the value slots the page stores: valid and null items, but
not the slots of null or empty lists.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lance_gpu.errors import UnsupportedFeatureError
from lance_gpu.file.page import ALL_VALID_ITEM, LIST_LAYERS, NULLABLE_ITEM
from lance_gpu.file.writer._jsonb import text_to_jsonb
from lance_gpu.table.schema import LanceField

__all__ = ["LeafColumn", "fixed_width_bytes", "fsl_layers", "is_variable", "shred", "storage_type", "variable_parts"]


@dataclass(slots=True)
class LeafColumn:
    """One leaf column of a top-level field, shredded for one page.

    ``values`` holds the visible value slots in level order (for a dictionary leaf: the
    indices, with ``dictionary`` the items).  ``rep`` / ``def_`` are u16 levels or None.
    """

    field: LanceField
    values: pa.Array
    rep: np.ndarray | None
    def_: np.ndarray | None
    layers: tuple[int, ...]
    num_levels: int
    num_rows: int
    dictionary: pa.Array | None = None

    @property
    def num_values(self) -> int:
        return len(self.values)

    @property
    def max_rep(self) -> int:
        return sum(1 for k in self.layers if k in LIST_LAYERS)

    @property
    def max_visible_def(self) -> int:
        """Highest definition level that still has a value slot (levels of item layers inside
        the inner-most list)."""
        from cuda_kernels.levels import _NUM_DEF

        total = 0
        for k in self.layers:
            if k in LIST_LAYERS:
                break
            total += _NUM_DEF[k]
        return total

    @property
    def visible(self) -> np.ndarray | None:
        """Per level: does it hold a value slot?  None when every level does."""
        if self.rep is None or self.def_ is None:
            return None
        return self.def_ <= self.max_visible_def

    @property
    def null_values(self) -> np.ndarray | None:
        """Per visible value: is it null?  None when none is."""
        if self.def_ is None:
            return None
        vis = self.visible
        d = self.def_ if vis is None else self.def_[vis]
        nulls = d != 0
        return nulls if nulls.any() else None


#: Arrow type ids (``DataType.id``, what ``pa.types.is_*`` compare) of the variable-width
#: types Lance stores as they are, and of the view types it stores as those.
VARIABLE_IDS = frozenset(t.id for t in (pa.string(), pa.large_string(), pa.binary(), pa.large_binary()))
TEXT_IDS = frozenset(t.id for t in (pa.string(), pa.large_string(), pa.string_view()))
LARGE_VARIABLE_IDS = frozenset(t.id for t in (pa.large_string(), pa.large_binary()))
_STRING_VIEW = pa.string_view().id
_BINARY_VIEW = pa.binary_view().id
_FIXED_SIZE_LIST = pa.list_(pa.int8(), 1).id
_BOOL = pa.bool_().id
_NULL = pa.null().id
#: Type ids of leaves that are neither nested, dictionaries, nulls, views nor extensions:
#: a top-level array of one of these shreds to itself (see :func:`_shred_walk`).
_PLAIN_LEAF_IDS = frozenset(
    t.id
    for t in (
        pa.bool_(), pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(),
        pa.uint64(), pa.float16(), pa.float32(), pa.float64(), pa.date32(), pa.date64(), pa.time32("s"),
        pa.time64("us"), pa.timestamp("us"), pa.duration("us"), pa.decimal128(1), pa.decimal256(1),
        pa.binary(1), pa.string(), pa.large_string(), pa.binary(), pa.large_binary(),
    )
)


def storage_type(t: pa.DataType) -> pa.DataType:
    return t.storage_type if isinstance(t, pa.BaseExtensionType) else t


def is_variable(t: pa.DataType) -> bool:
    """String, large string, binary or large binary (not views, not extensions)."""
    return t.id in VARIABLE_IDS


def _validity(arr: pa.Array) -> np.ndarray | None:
    if arr.null_count == 0:
        return None
    if pa.types.is_null(arr.type):
        return np.zeros(len(arr), np.bool_)
    return arr.is_valid().to_numpy(zero_copy_only=False)


def _plain(arr: pa.Array) -> pa.Array:
    """The array with extension and view types replaced by what Lance stores."""
    if isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    tid = arr.type.id
    if tid == _STRING_VIEW:
        return arr.cast(pa.string())
    if tid == _BINARY_VIEW:
        return arr.cast(pa.binary())
    return arr


def shred(array: pa.Array, field: LanceField) -> list[LeafColumn]:
    """The leaf columns of one top-level field's array, in column order."""
    out: list[LeafColumn] = []
    _shred_walk(array, field, [], len(array), out)
    return out


def _shred_walk(arr: pa.Array, f: LanceField, chain: list[tuple[np.ndarray | None, np.ndarray | None]], num_rows: int,
                out: list[LeafColumn]) -> None:
    """Append the leaf columns of ``arr`` (field ``f``, under the ``chain`` of (validity, offsets)
    of its parents; ``num_rows`` top-level rows) to ``out`` (module level: a recursive closure
    would leave a reference cycle per field written)."""
    if not chain and arr.type.id in _PLAIN_LEAF_IDS:
        # a top-level leaf of a plain type (most columns): itself, one item layer
        validity = _validity(arr)
        if validity is None:
            out.append(LeafColumn(f, arr, None, None, (ALL_VALID_ITEM,), len(arr), num_rows))
        else:
            out.append(LeafColumn(f, arr, None, (~validity).astype(np.uint16), (NULLABLE_ITEM,), len(arr), num_rows))
        return
    from cuda_kernels.levels import ravel_levels

    if f.logical_type == "json" and isinstance(arr, pa.ExtensionArray):
        # arrow.json text is stored as JSONB; large_binary input (a rewrite) already is
        arr = text_to_jsonb(arr.storage, f.dotted_path)
    arr = _plain(arr)
    t = arr.type
    if pa.types.is_struct(t):
        if not f.children:
            # pylance 14 writes an empty struct as its own column of placeholder pages (an
            # all-null constant page of one item layer), and only one without nulls outside
            # lists; inside a struct it writes one but then reads that struct's other fields
            # as NULL, so only top-level empty structs without nulls are written here
            if chain or arr.null_count:
                where = "inside another field" if chain else "with null rows"
                raise UnsupportedFeatureError(
                    f"empty struct field {f.dotted_path!r} {where} cannot be written: only top-level empty "
                    "structs without nulls (pylance: 'Empty structs with rep/def information are not yet supported')"
                )
            placeholder = np.ones(num_rows, np.uint16)
            out.append(LeafColumn(f, pa.nulls(num_rows), None, placeholder, (NULLABLE_ITEM,), num_rows, num_rows))
            return
        sub = [*chain, (_validity(arr), None)]
        for i, child in enumerate(f.children):
            _shred_walk(arr.field(i), child, sub, num_rows, out)
        return
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        offsets = arr.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
        first, last = int(offsets[0]), int(offsets[-1])
        sub = [*chain, (_validity(arr), offsets - first)]
        # The child may be longer than what the offsets reach (slices, rebuilt arrays).
        _shred_walk(arr.values.slice(first, last - first), f.children[0], sub, num_rows, out)
        return
    if pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        raise UnsupportedFeatureError(f"field {f.dotted_path!r}: list views are not supported")
    if pa.types.is_fixed_size_list(t) and pa.types.is_struct(t.value_type):
        raise UnsupportedFeatureError(f"field {f.dotted_path!r}: fixed-size lists of structs are not supported")
    dictionary = None
    leaf = arr
    validity = _validity(arr)
    if pa.types.is_dictionary(t):
        leaf = arr.indices
        dictionary = _plain(arr.dictionary)
        if dictionary.null_count:
            # A null dictionary item makes the rows that use it null (normalised nulls).
            item_valid = dictionary.is_valid().to_numpy(zero_copy_only=False)
            idx = leaf.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
            ok = item_valid[idx]
            validity = ok if validity is None else (validity & ok)
            if validity.all():
                validity = None
    if not chain:
        # a top-level leaf: one item layer, definition level 1 for a null
        def_ = None if validity is None else (~validity).astype(np.uint16)
        kind = ALL_VALID_ITEM if validity is None else NULLABLE_ITEM
        out.append(LeafColumn(f, leaf, None, def_, (kind,), len(leaf), num_rows, dictionary))
        return
    layers = [*chain, (validity, None)][::-1]
    rav = ravel_levels(layers, num_rows)
    idx = rav.value_index
    n = len(leaf)
    if idx.size == n and (n == 0 or (idx[0] == 0 and idx[-1] == n - 1 and np.all(np.diff(idx) == 1))):
        values = leaf
    else:
        values = leaf.take(pa.array(idx, pa.int64()))
    out.append(
        LeafColumn(
            field=f,
            values=values,
            rep=rav.rep,
            def_=rav.def_,
            layers=tuple(int(k) for k in rav.layer_kinds),
            num_levels=int(rav.num_levels),
            num_rows=num_rows,
            dictionary=dictionary,
        )
    )


# --------------------------------------------------------------------------------------------
# raw buffers of leaf arrays


def fixed_width_bytes(arr: pa.Array) -> tuple[np.ndarray, int]:
    """The packed value bytes of a fixed-width array (bools bit-packed LSB first) and the
    bits per value; fixed-size lists give ``dim`` items per value."""
    arr = _plain(arr)
    t = arr.type
    tid = t.id
    n = len(arr)
    if tid == _FIXED_SIZE_LIST:
        dim = t.list_size
        child = arr.values.slice(arr.offset * dim, n * dim)
        data, bits = fixed_width_bytes(child)  # null items keep whatever bytes they hold
        return data, bits * dim
    if tid == _BOOL:
        buf = arr.buffers()[1]
        raw = np.frombuffer(buf, np.uint8) if buf is not None else np.zeros(0, np.uint8)
        off = arr.offset
        if off % 8 == 0:
            data = raw[off // 8 : off // 8 + (n + 7) // 8].copy()
        else:
            flags = np.unpackbits(raw, bitorder="little")[off : off + n]
            data = np.packbits(flags, bitorder="little")
        if n % 8:
            data[-1] &= (1 << (n % 8)) - 1
        return data, 1
    if tid == _NULL:
        return np.zeros(n, np.uint8), 8
    width = t.bit_width
    if width % 8:
        raise UnsupportedFeatureError(f"type {t} has a width of {width} bits")
    nbytes = width // 8
    buf = arr.buffers()[1]
    if buf is None or n == 0:
        return np.zeros(n * nbytes, np.uint8), width
    data = np.frombuffer(buf, np.uint8, count=n * nbytes, offset=arr.offset * nbytes)
    return data, width


def fsl_layers(arr: pa.Array) -> list[tuple[int, np.ndarray | None]]:
    """``(dimension, item validity)`` of each fixed-size-list layer of an FSL array, outer
    first: the validity (bool, ``n * dims so far`` entries) of that layer's items, as Arrow
    holds it, or None when no item is null inside a valid list.  Null items under null
    lists are don't-care slots: on their own they add no validity (pylance would write it;
    leaving it out keeps such pages readable by readers without item validity)."""
    out: list[tuple[int, np.ndarray | None]] = []
    arr = _plain(arr)
    n = len(arr)
    parent = _validity(arr)  # per item of this layer: are it and its lists valid?
    while pa.types.is_fixed_size_list(arr.type):
        dim = arr.type.list_size
        child = _plain(arr.values.slice(arr.offset * dim, n * dim))
        n *= dim
        valid = _validity(child)
        above = None if parent is None else np.repeat(parent, dim)
        if valid is not None and above is not None and not np.any(~valid & above):
            valid = None
        out.append((dim, valid))
        parent = above if valid is None else (valid if above is None else valid & above)
        arr = child
    return out


def variable_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, int]:
    """``(offsets int64 from 0, bytes, offset bits)`` of a string / binary array."""
    arr = _plain(arr)
    large = arr.type.id in LARGE_VARIABLE_IDS
    n = len(arr)
    odt = np.int64 if large else np.int32
    bufs = arr.buffers()
    if bufs[1] is None or n == 0:
        return np.zeros(n + 1, np.int64), np.zeros(0, np.uint8), 64 if large else 32
    offs = np.frombuffer(bufs[1], odt, count=n + 1, offset=arr.offset * np.dtype(odt).itemsize).astype(np.int64)
    base, end = int(offs[0]), int(offs[-1])
    data = np.frombuffer(bufs[2], np.uint8)[base:end] if bufs[2] is not None and end > base else np.zeros(0, np.uint8)
    return offs - base, data, 64 if large else 32
