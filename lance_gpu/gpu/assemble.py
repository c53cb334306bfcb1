# SPDX-License-Identifier: Apache-2.0
"""Decoded leaves to device columns: levels to validity and offsets, then the field's tree.

Mirrors the CPU's :func:`lance_gpu.file.arrow.assemble` (same layer walk, same checks).  The
levels of every leaf of every field of a read unit, across its fragments, are unravelled
together on the device (``cuda_kernels.unravel_segments_gpu``: one copy back per unit,
however many fragments and leaves; a flags launch and one scan for the leaves with
repetition levels, then one launch for all, in which a leaf without them -- a flat nullable
column -- takes 32 levels a thread, writes them as one validity bitmask word and adds the
word's nulls with one atomic), and every buffer is a view into the unit's shared device
buffers.  A layer's validity is a :class:`~lance_gpu.gpu.validity.Validity` of the words
the unravel wrote, list and item layers of leaves with repetition levels as well as flat
ones: no validity byte is allocated on a read.  A layer of a leaf with repetition levels
starts at bit 0 of a 64-byte slot of its own; the layers of a column's leaves without them
(the same field's leaf in each fragment of the unit) are consecutive bits of one slot
(their fragments' own validity at bit offsets), so that a one-unit read's column mask is
written once, there, and combining takes it as it is.  Likewise a list layer of a column's
leaves with repetition levels is also written as the column's int32 offsets from 0 over
the unit's fragments (``unravel_segments_gpu(cudf=True)``; ``DeviceColumn.cudf_offsets``),
what ``to_cudf`` hands out.  In a ``to_cudf`` read of several units the read places the
flat runs' bits at the unit's rows of one zeroed arena for the whole read instead
(``build_fields``'s ``masks``), and the list layers' offsets and every layer's bits of
the leaves with repetition levels at the unit's entries of one arena for the whole read
(``build_fields``'s ``lists``, :mod:`lance_gpu.gpu.readlists`).  A struct's layer is such a run too, and its children's layers
are null wherever it is (a struct's null is a definition level above its children's:
``DeviceColumn.children_hold_nulls``), so ``to_cudf`` takes a struct's mask and its
children's as they are, with no AND.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa

import cuda_kernels as ck
from cuda_kernels.errors import CorruptInputError
from lance_gpu.errors import CorruptFileError
from lance_gpu.file.v2_1.repdef import restart_levels
from lance_gpu.gpu import _array
from lance_gpu.gpu._array import DeviceArray
from lance_gpu.gpu.columns import DeviceColumn, _storage
from lance_gpu.gpu.decode import UnitBuffers
from lance_gpu.gpu.plan import FieldPlan, LeafPlan, item_regions, output_columns
from lance_gpu.gpu.readlists import ReadLists
from lance_gpu.gpu.validity import Validity


class _Slots:
    __slots__ = ("count", "cudf_offsets", "nulls", "offsets", "validity")

    def __init__(self, validity: Validity | None, offsets, count: int, nulls: int | None = None,
                 cudf_offsets: tuple[DeviceArray, int] | None = None) -> None:
        self.validity = validity
        self.offsets = offsets
        self.count = count
        self.nulls = nulls  # null entries, counted on the device (None: count when asked)
        self.cudf_offsets = cudf_offsets  # a list layer's: its column's int32 offsets in the unit, its first row in them


class _Leaf:
    __slots__ = ("k", "plan", "slots", "span")

    def __init__(self, plan: LeafPlan, slots: list[_Slots], span: tuple[int, int] | None) -> None:
        self.plan = plan
        self.slots = slots
        self.k = len(slots)
        self.span = span


#: where a read writes the validity of its columns' flat leaves (``build_fields``'s
#: ``masks``): a zeroed ``uint32`` device array, and the first bit of each layer of a leaf
#: there, by ``id`` of its :class:`LeafPlan`
ReadMasks = tuple[DeviceArray, dict[int, tuple[int, ...]]]


def _into_runs(leaves: list[LeafPlan], runs: list[int], masks: ReadMasks | None) -> dict[int, tuple[int, ...]]:
    """The runs of the unit whose layers' bits go to ``masks`` (``{run: first bit of each
    layer}``): every leaf of the run placed there, none with repetition levels, each
    layer's bits right after the previous leaf's (the run's leaves being consecutive
    fragments' of a column the read placed so)."""
    if masks is None:
        return {}
    members: dict[int, list[LeafPlan]] = {}
    for k, leaf in enumerate(leaves):
        members.setdefault(runs[k], []).append(leaf)
    out = {}
    for run, group in members.items():
        got = [masks[1].get(id(leaf)) for leaf in group]
        bits = [b for b in got if b is not None]
        if len(bits) < len(group) or any(leaf.has_rep or len(b) != len(leaf.layers) for leaf, b in zip(group, bits, strict=True)):
            continue
        if all(nxt[m] == cur[m] + leaf.num_levels for cur, nxt, leaf in zip(bits, bits[1:], group, strict=False) for m in range(len(cur))):
            out[run] = bits[0]
    return out


def _unravel_all(leaves: list[LeafPlan], bufs: UnitBuffers, runs: list[int], masks: ReadMasks | None = None,
                 lists: ReadLists | None = None) -> tuple[list[list[_Slots]], dict[int, tuple[int, int]]]:
    """The slots of every layer of every leaf (leaves without levels directly, the others in
    one segmented unravel over the unit's level buffer), and the span ``(offsets[0],
    offsets[n])`` of every variable-width leaf's values, read back in the same copy (so that
    no column needs a readback on its way out).  ``runs[k]``: the output column of leaf
    ``k``; the validity of a column's leaves without repetition levels is one run of bits
    (``LevelSegment.run``): its fragments' masks are consecutive bits of one 64-byte slot,
    which combining then takes as the column's mask, as it is.  A leaf without levels (a
    fragment with no null) of such a column joins its run, so that its all-valid bits are in
    the run's slot too (threads of the one scatter launch, no launch of its own).  ``masks``:
    the runs whose leaves the read placed there (:func:`_into_runs`) write their bits there,
    every leaf of them (``unravel_segments_gpu(words_into=...)``).  ``lists``: the read's
    list arena, where the runs of leaves with repetition levels it placed write their
    placed layers' offsets and bits (``unravel_segments_gpu(lists_into=...)``), and which
    counts the unit's entries."""
    out: list[list[_Slots]] = [[_Slots(None, None, leaf.num_levels, 0) for _ in leaf.layers] for leaf in leaves]
    into = _into_runs(leaves, runs, masks)
    flat_runs = {runs[k] for k, leaf in enumerate(leaves) if leaf.has_def and not leaf.has_rep} | set(into)
    leveled = [k for k, leaf in enumerate(leaves) if leaf.has_rep or leaf.has_def or runs[k] in flat_runs]
    var = [k for k, leaf in enumerate(leaves) if leaf.kind == "var"]
    if not leveled and not var:
        return out, {}
    segments = [
        ck.LevelSegment(
            leaves[k].rep_pos if leaves[k].has_rep else -1, leaves[k].def_pos if leaves[k].has_def else -1,
            leaves[k].num_levels, tuple(leaves[k].layers), runs[k],
        )
        for k in leveled
    ]
    _check_restarts(leaves, leveled, bufs)
    positions = np.array([[leaves[k].slot_lo, leaves[k].slot_lo + leaves[k].num_values] for k in var], np.int64).reshape(-1)
    try:
        results, bounds = ck.unravel_segments_gpu(bufs.levels, segments, read_also=(bufs.var_offsets, positions), cudf=True,
                                                  words_into=(masks[0], into) if into and masks is not None else None,
                                                  lists_into=None if lists is None else lists.targets(leaves, runs))
    except (CorruptInputError, ValueError) as exc:
        if getattr(exc, "earlier", False) or isinstance(exc, CorruptFileError):
            raise  # an earlier launch's flag (read back with the unravel's results), or its explanation
        at = getattr(exc, "segment", 0)
        leaf = leaves[leveled[at]]
        raise CorruptFileError(leaf.path, f"column {leaf.column}: repetition / definition levels do not fit the column's layers ({exc})") from exc
    for k, result in zip(leveled, results, strict=True):
        out[k] = [
            _Slots(
                _layer_validity(lr),
                None if lr.offsets is None else _array.as_device(lr.offsets),
                int(lr.length),
                None if lr.null_count < 0 else int(lr.null_count),
                None if lr.cudf_offsets is None else (_array.as_device(lr.cudf_offsets), int(lr.cudf_row)),
            )
            for lr in result.layers
        ]
    if lists is not None:
        counts: list[list[int] | None] = [None] * len(leaves)
        for k, result in zip(leveled, results, strict=True):
            counts[k] = [int(lr.length) for lr in result.layers]
        lists.unraveled(leaves, counts)
    spans = {k: (int(bounds[2 * j]), int(bounds[2 * j + 1])) for j, k in enumerate(var)}
    return out, spans


def _layer_validity(lr: ck.LayerResult) -> Validity | None:
    if lr.validity is None:
        return None
    assert lr.words, "the segmented unravel writes every layer's validity as words"
    return Validity.of_words(_array.as_device(lr.validity), int(lr.bit_offset), int(lr.length))


@functools.lru_cache(maxsize=256)
def _restarts(layers: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(x) for x in restart_levels(layers))


def _check_restarts(leaves: list[LeafPlan], leveled: list[int], bufs: UnitBuffers) -> None:
    """The CPU path's list-levels check (``repdef.continues_empty_list``) on the device, over
    every leaf with repetition and definition levels in one launch: no item may continue a
    list its level left null or empty.  Its flag is read with the unit's other error flags."""
    picked = [k for k in leveled if leaves[k].has_rep and leaves[k].has_def and any(_restarts(tuple(leaves[k].layers)))]
    if not picked:
        return

    def bad(segment: int) -> CorruptFileError:
        leaf = leaves[picked[min(segment, len(picked) - 1)]]
        return CorruptFileError(leaf.path, f"column {leaf.column}: an item continues a list its level left null or empty (device decode)")

    ck.check_restarts_segments_gpu(
        bufs.levels, [leaves[k].rep_pos for k in picked], [leaves[k].def_pos for k in picked],
        [leaves[k].num_levels for k in picked], [_restarts(tuple(leaves[k].layers)) for k in picked], on_bad=bad,
    )


def _leaf_column(t: pa.DataType, leaf: LeafPlan, slots: _Slots, bufs: UnitBuffers, span: tuple[int, int] | None) -> DeviceColumn:
    if slots.count != leaf.num_values:
        raise CorruptFileError(leaf.path, f"column {leaf.column}: expected {slots.count} values, decoded {leaf.num_values}")
    n = leaf.num_values
    if leaf.kind == "var":
        offsets = bufs.var_offsets[leaf.slot_lo : leaf.slot_lo + n + 1]
        return DeviceColumn(t, n, slots.validity, bufs.var_bytes, offsets, _nulls=slots.nulls, span=span,
                            cudf_offsets=bufs.cudf_offsets_of(leaf.slot_lo, n))
    data = bufs.fixed[leaf.value_pos : leaf.value_pos + n * leaf.width]
    # fixed-size lists with item validity: a byte per item, layer after layer (the outer
    # layer's items: item_validity; nested layers': inner_item_validity)
    layers = [Validity.of_bytes(bufs.fixed[at : at + size]) for at, size in item_regions(leaf, 0, n)]
    return DeviceColumn(t, n, slots.validity, data, _nulls=slots.nulls, item_validity=layers[0] if layers else None,
                        inner_item_validity=tuple(layers[1:]))


def _build(t: pa.DataType, leaves: list[_Leaf], cursor: list[int], depth: int, bufs: UnitBuffers, path: str) -> DeviceColumn:
    s = _storage(t)
    if pa.types.is_struct(s) or pa.types.is_map(s) or pa.types.is_list(s) or pa.types.is_large_list(s):
        first = leaves[cursor[0]]
        li = first.k - 1 - depth
        if li < 0:
            raise CorruptFileError(path, "column has fewer rep/def layers than its type's nesting")
        slots = first.slots[li]
        if pa.types.is_struct(s):
            children = [_build(s.field(i).type, leaves, cursor, depth + 1, bufs, path) for i in range(s.num_fields)]
            for c in children:
                if c.length != slots.count:
                    raise CorruptFileError(path, f"struct field of {c.length} rows under a struct of {slots.count}")
            # a struct's null is a null of every layer below it (its def level is above theirs):
            # each child's layer validity is already null there
            return DeviceColumn(t, slots.count, slots.validity, children=children, _nulls=slots.nulls, children_hold_nulls=True)
        if slots.offsets is None:
            raise CorruptFileError(path, "list column without list levels")
        if pa.types.is_map(s):
            child = _build(pa.struct([s.key_field, s.item_field]), leaves, cursor, depth + 1, bufs, path)
        else:
            child = _build(s.value_type, leaves, cursor, depth + 1, bufs, path)
        # the unravelled offsets start at 0 and end at the child's length
        return DeviceColumn(t, slots.count, slots.validity, offsets=slots.offsets, children=[child], _nulls=slots.nulls, span=(0, child.length),
                            cudf_offsets=slots.cudf_offsets)
    leaf = leaves[cursor[0]]
    cursor[0] += 1
    if leaf.k - 1 - depth != 0:
        raise CorruptFileError(path, "column's rep/def layers do not match its type's nesting")
    return _leaf_column(t, leaf.plan, leaf.slots[0], bufs, leaf.span)


def build_fields(fps: list[FieldPlan], bufs: UnitBuffers, masks: ReadMasks | None = None,
                 lists: ReadLists | None = None) -> list[DeviceColumn]:
    """The device columns of a unit's planned fields (each: all the physical rows its
    fragment decoded), with the levels of all their leaves unravelled at once; ``masks``:
    where the read wants the validity of its flat leaves (:data:`ReadMasks`); ``lists``:
    where it wants the offsets and validity of its leaves with repetition levels
    (:class:`~lance_gpu.gpu.readlists.ReadLists`)."""
    flat = [lp for fp in fps for lp in fp.leaves]
    slots, spans = _unravel_all(flat, bufs, output_columns(fps), masks, lists)
    cols = []
    at = 0
    for fp in fps:
        leaves = [_Leaf(lp, sl, spans.get(at + j)) for j, (lp, sl) in enumerate(zip(fp.leaves, slots[at : at + len(fp.leaves)], strict=True))]
        at += len(fp.leaves)
        path = fp.leaves[0].path if fp.leaves else "<no file>"
        col = _build(fp.arrow_field.type, leaves, [0], 0, bufs, path)
        if col.length != fp.num_rows:
            raise CorruptFileError(path, f"field {fp.name!r} decoded to {col.length} rows where its pages hold {fp.num_rows}")
        cols.append(col)
    return cols


def empty_like(t: pa.DataType) -> DeviceColumn:
    return DeviceColumn.from_arrow(pa.array([], type=t))


__all__ = ["build_fields", "empty_like"]

