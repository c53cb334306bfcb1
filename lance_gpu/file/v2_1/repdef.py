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
the slots of the layer inside.  The leaf's slots are the visible values, in order.  The
algorithm itself is the shared CPU/GPU primitive ``cuda_kernels.levels.unravel_levels``;
this module holds the Lance-side tables (which definition level means what).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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


def unravel(rep: np.ndarray | None, def_: np.ndarray | None, num_levels: int, layers: tuple[int, ...]) -> list[LayerSlots] | None:
    """Per-layer slots of one leaf; None if the levels are impossible for these layers."""
    from cuda_kernels.errors import CorruptInputError
    from cuda_kernels.levels import unravel_levels

    try:
        result = unravel_levels(rep, def_, list(layers), num_levels=num_levels)
    except (CorruptInputError, ValueError):
        return None
    return [LayerSlots(lr.validity, lr.offsets, int(lr.length)) for lr in result.layers]
