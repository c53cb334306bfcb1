# SPDX-License-Identifier: Apache-2.0
"""Repetition / definition levels of one leaf column to per-layer validity and offsets.

Layers are indexed inner-most first (0 = the leaf item).  For K list layers, a position with
repetition level r starts a new slot at every layer i with ``r >= lists_at_or_below(i)``: rep
K starts a new top-level row, rep 0 only a new item in the inner-most list.  The definition
level says which layer (if any) is null or empty at the position:

* a null or empty *list* at layer j has a slot at j but nothing inside it (invisible);
* a null *item* layer (leaf or struct) still gives every layer below it a (null) slot, down
  to and including the first list layer below it.

The result gives, per layer, the validity of its slots and, for list layers, offsets into
the slots of the layer inside.  The leaf's slots are the visible values, in order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from lance_gpu.file.page import LIST_LAYERS
from lance_gpu.file.v2_1.levels import def_meaning


@dataclass(slots=True)
class LayerSlots:
    validity: np.ndarray | None  # bool per slot, None when all valid
    offsets: np.ndarray | None  # int64 (slots + 1) for list layers
    count: int


def def_tables(layers: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per definition level: its layer (-1 for 0), whether it means null, and the lowest
    layer index that still gets a slot."""
    meaning = def_meaning(layers)
    n = len(meaning) + 1
    layer_of = np.full(n, -1, np.int64)
    is_null = np.zeros(n, np.bool_)
    reach = np.zeros(n, np.int64)
    is_list = [layer in LIST_LAYERS for layer in layers]
    for d, (li, ev) in enumerate(meaning, start=1):
        layer_of[d] = li
        is_null[d] = ev == "null"
        lists_below = [j for j in range(li + 1) if is_list[j]]
        reach[d] = max(lists_below) if lists_below else 0
    return layer_of, is_null, reach


def invisible_levels(layers: tuple[int, ...]) -> np.ndarray:
    """invisible[d]: def level d leaves the leaf without a value slot."""
    _layer_of, _is_null, reach = def_tables(layers)
    out = reach > 0
    is_list0 = layers[0] in LIST_LAYERS if layers else False
    if is_list0:
        out[1:] = True
    return out


@njit(cache=True, nogil=True)
def _unravel(rep, dfn, n, k, is_list, lists_le, layer_of, is_null, reach):  # pragma: no cover
    validity = np.ones((k, n), np.bool_)
    starts = np.zeros((k, n + 1), np.int64)
    counts = np.zeros(k, np.int64)
    any_null = np.zeros(k, np.bool_)
    ok = True
    for p in range(n):
        r = rep[p] if rep.size else 0
        d = dfn[p] if dfn.size else 0
        if d >= layer_of.size:
            ok = False
            break
        li = layer_of[d]
        low = reach[d]
        for i in range(k - 1, low - 1, -1):
            if r >= lists_le[i]:
                s = counts[i]
                valid = True
                if d > 0 and (i < li or (i == li and is_null[d])):
                    valid = False
                validity[i, s] = valid
                if not valid:
                    any_null[i] = True
                if is_list[i]:
                    starts[i, s] = counts[i - 1] if i > 0 else 0
                counts[i] = s + 1
    return validity, starts, counts, any_null, ok


def unravel(rep: np.ndarray | None, def_: np.ndarray | None, num_levels: int, layers: tuple[int, ...]) -> list[LayerSlots] | None:
    """Per-layer slots of one leaf; None if the levels are impossible for these layers."""
    k = len(layers)
    is_list = np.array([layer in LIST_LAYERS for layer in layers], np.bool_)
    if rep is None and not is_list.any():
        # Items and structs only: one slot per level at every layer; a table lookup per layer.
        layer_of, is_null, _reach = def_tables(layers)
        if def_ is None:
            return [LayerSlots(None, None, num_levels) for _ in layers]
        if def_.size and int(def_.max()) >= layer_of.size:
            return None
        out = []
        for i in range(k):
            null_at = (layer_of > i) | ((layer_of == i) & is_null)
            null_at[0] = False
            if not null_at.any():
                out.append(LayerSlots(None, None, num_levels))
                continue
            valid = ~null_at[def_]
            out.append(LayerSlots(valid if not valid.all() else None, None, num_levels))
        return out
    lists_le = np.cumsum(is_list).astype(np.int64)
    layer_of, is_null, reach = def_tables(layers)
    empty16 = np.zeros(0, np.uint16)
    validity, starts, counts, any_null, ok = _unravel(
        rep if rep is not None else empty16,
        def_ if def_ is not None else empty16,
        num_levels,
        k,
        is_list,
        lists_le,
        layer_of,
        is_null,
        reach,
    )
    if not ok:
        return None
    out = []
    for i in range(k):
        c = int(counts[i])
        offsets = None
        if is_list[i]:
            offsets = starts[i, : c + 1].copy()
            offsets[c] = counts[i - 1] if i > 0 else 0
        out.append(LayerSlots(validity[i, :c].copy() if any_null[i] else None, offsets, c))
    return out
