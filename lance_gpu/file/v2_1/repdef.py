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

import functools
from dataclasses import dataclass

import numpy as np

from cuda_kernels._jitcache import njit
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


def restart_levels(layers: tuple[int, ...]) -> np.ndarray:
    """``restart[d]``: the repetition level the position after one with definition level
    ``d`` needs at least.  A level that leaves a list layer null or empty (``d`` invisible,
    its slot at list layer ``reach[d]`` holds nothing) must be followed by a level that
    starts a new slot at that layer: repetition level at least the number of list layers
    at or below it.  0 where anything may follow."""
    _layer_of, _is_null, reach = def_tables(layers)
    invisible = invisible_levels(layers)
    out = np.zeros(reach.size, np.int64)
    for d in range(1, reach.size):
        if invisible[d]:
            out[d] = sum(1 for layer in layers[: int(reach[d]) + 1] if layer in LIST_LAYERS)
    return out


def continues_empty_list(rep: np.ndarray | None, def_: np.ndarray | None, layers: tuple[int, ...]) -> int:
    """The first position that puts an item inside a list left null or empty, or -1.

    A level whose definition level leaves a list layer null or empty must start a new slot
    at that layer (its repetition level at least :func:`restart_levels`), and so must the
    level after it: otherwise an item would sit inside a null or empty list, and the
    offsets would disagree with the values (a corrupt rep/def pair; pylance raises there).
    Definition levels beyond the layers' are left to :func:`unravel`."""
    if rep is None or def_ is None or not rep.size:
        return -1
    restart = _restart_table(layers)
    if restart is None or int(def_.max()) >= restart.size:
        return -1  # nothing can be null or empty / an out-of-range level (unravel_levels says so)
    return int(_first_continuing(rep, def_, restart))


@functools.lru_cache(maxsize=256)
def _restart_table(layers: tuple[int, ...]) -> np.ndarray | None:
    """:func:`restart_levels` of ``layers`` (computed once per layer tuple), None when no
    level leaves a list null or empty."""
    restart = restart_levels(layers)
    return restart if restart.any() else None


@njit(cache=True, nogil=True)
def _first_continuing(rep, def_, restart):  # pragma: no cover - compiled
    """One pass of :func:`continues_empty_list`: the first i with ``rep[i] <
    restart[def_[i]]`` or ``rep[i] < restart[def_[i - 1]]``, or -1 (every level is in
    the table: the caller checked)."""
    prev_need = np.int64(0)
    for i in range(rep.size):
        need = restart[np.int64(def_[i])]
        r = np.int64(rep[i])
        if r < need or r < prev_need:
            return i
        prev_need = need
    return -1


def unravel(rep: np.ndarray | None, def_: np.ndarray | None, num_levels: int, layers: tuple[int, ...]) -> list[LayerSlots] | None:
    """Per-layer slots of one leaf; None if the levels are impossible for these layers
    (a level out of range, a first level that does not start a row, an item continuing a
    list its previous level left null or empty: :func:`continues_empty_list`)."""
    from cuda_kernels.errors import CorruptInputError
    from cuda_kernels.levels import unravel_levels

    if continues_empty_list(rep, def_, layers) >= 0:
        return None
    try:
        result = unravel_levels(rep, def_, list(layers), num_levels=num_levels)
    except (CorruptInputError, ValueError):
        return None
    return [LayerSlots(lr.validity, lr.offsets, int(lr.length)) for lr in result.layers]
