# SPDX-License-Identifier: Apache-2.0
"""The list offsets and list masks of a ``to_cudf`` read of several units, written once.

A read of several units with no gather (``scan_device(whole_read=True)``,
:mod:`lance_gpu.gpu.read`) keeps every unit's columns to the end and combines them
(:mod:`lance_gpu.gpu.combine`).  Without this module each unit's level unravel writes the
cuDF offsets of its list layers from 0 and their validity bits in slots of its own
(``unravel_segments_gpu(cudf=True)``), and combining rebases the offsets and packs the bits
of every unit into the read's final buffers.  :class:`ReadLists` places instead, before the
first unit, every layer of the read's leaves with repetition levels that the assembler
reads (:func:`used_layers`) in one *read lists arena*: a slot of int32 offsets per list
layer and a slot of bitmask words per layer, each from a 64-byte boundary, the same
field's leaf ``j`` of every fragment one after the other in fragment order.  Every unit's
unravel then writes each such layer of its run (a column's leaves of the unit's fragments)
at the layer's *row* there -- its entries written by the earlier units -- the offsets
shifted by the entries of the layer inside written before (``unravel_segments_gpu(
lists_into=...)``): both are known on the host when the unit launches, each unit's unravel
reading its entry counts back.  So the offsets of a list layer over the read are one run of
the arena from 0, and its mask one run of bits from bit 0 of a 64-byte block with its null
count known, which combining takes as they are (``combine._offsets_run``,
``combine._mask_run``).

A slot's size is known before the first unit: a layer's entries are the leaf's rows where
the layer counts as many lists as the outermost one (its ``c`` is the leaf's repetition
depth: a level is an entry there only where a row starts), the leaf's values where it counts
no list (every level with a value slot), and else (a list layer between two others, or a
struct there) at most the leaf's levels (at most one entry a level per layer).  Where the
levels are in-band (``LeafPlan.levels_pending``: list pages whose chunk headers the
device pre-pass parses) the slot is sized by the planner's estimate of them (values plus
rows), and a unit whose levels (settled by its pre-pass when it unravels) could pass the
room left writes that layer in slots of its own (combining then writes the column, as
below).  Elsewhere a run whose entries pass its slot raises (a corrupt file: rows or values
other than the pages say; nothing written past the slot).  Layers not placed, and every layer of a column once a
unit's leaves of it do not continue its rows (a leaf without repetition levels, a layer
stack that differs, a CPU-decoded fragment), are written by combining, as before: the
unravel's own slots, rebased / packed there.  So is a list layer's offsets where the inner
layer's entries over the read may pass 2^31 - 1 (the unravel leaves that unit's layer in
its own slot), and a list layer's mask where a struct above it is null in a unit and the
layer's kind cannot be null (the unravel gives such a unit's layer no validity: combining
packs it and ANDs the struct's mask in).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from lance_gpu.file.page import LIST_LAYERS
from lance_gpu.gpu import _array
from lance_gpu.gpu._array import DeviceArray
from lance_gpu.gpu.columns import _storage
from lance_gpu.gpu.plan import FieldPlan, LeafPlan

_ALIGN_ENTRIES = 16  # int32 offsets: a slot from a 64-byte boundary
_SLOT_BITS = 512  # bitmask words: a slot of whole 64-byte blocks (cuDF's mask padding)

#: a placed layer's spec for ``unravel_segments_gpu(lists_into=...)``: (first entry of its
#: offsets slot or -1, first bit of its mask slot or -1, entries the slot holds, row, shift)
LayerInto = tuple[int, int, int, int, int]


def used_layers(t: pa.DataType) -> list[int]:
    """How many of each leaf's layers (inner-most first) the assembler reads from that leaf
    (:func:`lance_gpu.gpu.assemble._build`: a struct / list layer is read from the first
    leaf below it), for the leaves of a field of type ``t`` in order: the leaf's own layer,
    and every layer of the nodes above it of which it is the first leaf."""
    out: list[int] = []

    def walk(t: pa.DataType, depth: int, first: int) -> None:
        s = _storage(t)
        if pa.types.is_struct(s):
            for i in range(s.num_fields):
                walk(s.field(i).type, depth + 1, first if i == 0 else depth + 1)
        elif pa.types.is_map(s):
            walk(pa.struct([s.key_field, s.item_field]), depth + 1, first)
        elif pa.types.is_list(s) or pa.types.is_large_list(s):
            walk(s.value_type, depth + 1, first)
        else:
            out.append(depth - first + 1)

    walk(t, 0, 0)
    return out


def _list_depths(layers: Sequence[int]) -> list[int]:
    """``c`` of every layer (inner-most first): the list layers at or inside it."""
    c, out = 0, []
    for kind in layers:
        c += int(kind) in LIST_LAYERS
        out.append(c)
    return out


def _entries(leaf: LeafPlan, c: int, top: int) -> tuple[int, bool]:
    """The entries of a layer of ``c`` lists of a leaf of ``top`` (see the module
    docstring), or a bound of them, and whether that is only an estimate (the leaf's level
    count while its levels are in-band: ``LeafPlan.levels_pending``)."""
    if c == top:
        return leaf.num_rows, False
    if c == 0:
        return leaf.num_values, False
    return leaf.num_levels, leaf.levels_pending


class ReadLists:
    """The read lists arena of a ``to_cudf`` read of several units (module docstring):
    ``fields[k]``, the planned fields of fragment ``k`` by name, in fragment order."""

    def __init__(self, fields: Sequence[dict[str, FieldPlan]]) -> None:
        groups: dict[tuple[str, int], list[LeafPlan]] = {}
        used: dict[str, list[int]] = {}
        for by_name in fields:
            for name, fp in by_name.items():
                if name not in used:
                    used[name] = used_layers(fp.arrow_field.type)
                for j, leaf in enumerate(fp.leaves):
                    groups.setdefault((name, j), []).append(leaf)
        #: per column (a field's leaf j): its layers' (first entry | -1, first bit | -1, entries)
        self.slots: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
        #: per column: its leaves in order
        self.leaves: dict[tuple[str, int], list[LeafPlan]] = {}
        #: per column: which layers' slots are sized by an estimate (a unit whose levels could
        #: pass the slot's room writes such a layer in slots of its own)
        self.estimated: dict[tuple[str, int], list[bool]] = {}
        #: per column: (leaves decoded so far, each layer's entries so far), None once left out
        self.done: dict[tuple[str, int], tuple[int, list[int]] | None] = {}
        self._column: dict[int, tuple[tuple[str, int], int]] = {}  # id(leaf) -> (column, its place)
        entries = 0
        words = 0
        spans: list[tuple[tuple[str, int], list[tuple[int, int, int]]]] = []
        for key, leaves in groups.items():
            name, j = key
            nl = len(leaves[0].layers)
            keep = used[name][j] if j < len(used[name]) else 0
            if (not keep or not all(leaf.has_rep and len(leaf.layers) == nl for leaf in leaves)
                    or len({tuple(c for c in _list_depths(leaf.layers)) for leaf in leaves}) != 1):
                continue
            depths = _list_depths(leaves[0].layers)
            top = depths[-1]
            layers: list[tuple[int, int, int]] = []
            estimated: list[bool] = []
            for m in range(nl):
                counts = [_entries(leaf, depths[m], top) for leaf in leaves]
                total = -1 if m >= keep or any(n < 0 for n, _e in counts) else int(sum(n for n, _e in counts))
                estimated.append(any(e for _n, e in counts))
                if total < 0:
                    layers.append((-1, -1, 0))
                    continue
                is_list = m > 0 and depths[m] != depths[m - 1]
                entry = -1
                if is_list:
                    entry = entries
                    entries += -(-(total + 1) // _ALIGN_ENTRIES) * _ALIGN_ENTRIES
                bit = 32 * words
                words += -(-max(total, 1) // _SLOT_BITS) * (_SLOT_BITS // 32)
                layers.append((entry, bit, total))
            if all(e < 0 and b < 0 for e, b, _n in layers):
                continue
            spans.append((key, layers))
            self.leaves[key] = leaves
            self.estimated[key] = estimated
            self.done[key] = (0, [0] * nl)
            for i, leaf in enumerate(leaves):
                self._column[id(leaf)] = (key, i)
        self.slots = dict(spans)
        self.entries = entries  # int32 offsets of the arena
        self.words = words  # uint32 bitmask words after them
        self.offsets: DeviceArray | None = None
        self.bits: DeviceArray | None = None

    @property
    def nbytes(self) -> int:
        """The arena's bytes (what the memory budget counts for the whole read)."""
        return 4 * self.entries + 4 * self.words

    def allocate(self) -> None:
        """The arena: one zeroed allocation, the offsets then the words (a 64-byte boundary:
        the offsets' slots are whole 64-byte blocks)."""
        if not self.slots:
            return
        block = _array.zeros(max(4 * self.entries + 4 * self.words, 64), np.uint8)
        self.offsets = block[: 4 * self.entries].view(np.int32) if self.entries else block[:64].view(np.int32)
        self.bits = block[4 * self.entries :].view(np.uint32) if self.words else block[:64].view(np.uint32)

    def targets(self, leaves: Sequence[LeafPlan], runs: Sequence[int]) -> tuple[Any, Any, dict[int, tuple[LayerInto, ...]]] | None:
        """``unravel_segments_gpu``'s ``lists_into`` for a unit's leaves (``runs[k]``: the run
        of leaf ``k``, its output column): the runs whose leaves are the next leaves of a
        placed column, in order, with each layer's row and shift; None where none is."""
        if self.offsets is None or self.bits is None:
            return None
        members: dict[int, list[LeafPlan]] = {}
        for k, leaf in enumerate(leaves):
            members.setdefault(runs[k], []).append(leaf)
        out: dict[int, tuple[LayerInto, ...]] = {}
        for run, group in members.items():
            first = self._column.get(id(group[0]))
            if first is None:
                continue
            key, at = first
            done = self.done[key]
            if done is None or done[0] != at or any(self._column.get(id(leaf)) != (key, at + i) for i, leaf in enumerate(group)):
                continue
            rows = done[1]
            levels = sum(leaf.num_levels for leaf in group)  # (settled by now: a bound of every layer's entries)
            out[run] = tuple((e, b, n, rows[m], rows[m - 1] if m else 0)
                             if not (self.estimated[key][m] and rows[m] + levels > n) else (-1, -1, n, rows[m], 0)
                             for m, (e, b, n) in enumerate(self.slots[key]))
        return (self.offsets, self.bits, out) if out else None

    def unraveled(self, leaves: Sequence[LeafPlan], counts: Sequence[Sequence[int] | None]) -> None:
        """Count a unit's entries (``counts[k]``: every layer's of leaf ``k``; None: not
        unravelled) into their columns' rows; a column whose leaves do not continue its rows
        is left out from then on.  (A unit's layer the unravel did not write here after all
        -- its leaves no run, an inner layer's entries past int32 -- is counted too: the
        later units' rows stay right, and combining, finding that unit's offsets and bits
        elsewhere, writes the column.)"""
        for leaf, got in zip(leaves, counts, strict=True):
            place = self._column.get(id(leaf))
            if place is None:
                continue
            key, at = place
            done = self.done[key]
            if done is None or done[0] != at or got is None or len(got) != len(done[1]):
                self.done[key] = None
                continue
            self.done[key] = (at + 1, [r + int(n) for r, n in zip(done[1], got, strict=True)])


__all__ = ["LayerInto", "ReadLists", "used_layers"]
