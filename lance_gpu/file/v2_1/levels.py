# SPDX-License-Identifier: Apache-2.0
"""Definition-level numbering, and re-numbering between layer descriptions.

Lance numbers definition levels from the inner-most layer out: 0 means valid at every layer;
NULLABLE_ITEM, NULLABLE_LIST and EMPTYABLE_LIST add one level each (null, null, empty);
NULL_AND_EMPTY_LIST adds two (null first, then empty).  Pages of one column may describe
their layers differently (a page without nulls says ALL_VALID_ITEM), so their levels are
re-numbered to a common description before pages are joined.
"""

from __future__ import annotations

import numpy as np

from lance_gpu.file.page import (
    ALL_VALID_ITEM,
    ALL_VALID_LIST,
    EMPTYABLE_LIST,
    NULL_AND_EMPTY_LIST,
    NULLABLE_ITEM,
    NULLABLE_LIST,
    LeafPage,
)

_EVENTS = {
    ALL_VALID_ITEM: (),
    ALL_VALID_LIST: (),
    NULLABLE_ITEM: ("null",),
    NULLABLE_LIST: ("null",),
    EMPTYABLE_LIST: ("empty",),
    NULL_AND_EMPTY_LIST: ("null", "empty"),
}


def def_meaning(layers: tuple[int, ...]) -> list[tuple[int, str]]:
    """Level d (1-based) means ``def_meaning(layers)[d - 1]`` = (layer index, event)."""
    out: list[tuple[int, str]] = []
    for i, layer in enumerate(layers):
        out.extend((i, ev) for ev in _EVENTS[layer])
    return out


def merge_layer(a: int, b: int) -> int:
    if a == b:
        return a
    items = {ALL_VALID_ITEM, NULLABLE_ITEM}
    if a in items and b in items:
        return NULLABLE_ITEM
    events = set(_EVENTS[a]) | set(_EVENTS[b])
    if events == {"null"}:
        return NULLABLE_LIST
    if events == {"empty"}:
        return EMPTYABLE_LIST
    if not events:
        return ALL_VALID_LIST
    return NULL_AND_EMPTY_LIST


def common_layers(all_layers: list[tuple[int, ...]]) -> tuple[int, ...]:
    out = list(all_layers[0])
    for layers in all_layers[1:]:
        if len(layers) != len(out):
            raise ValueError("pages of one column disagree on their nesting depth")
        out = [merge_layer(a, b) for a, b in zip(out, layers)]
    return tuple(out)


def renumber(page: LeafPage, target: tuple[int, ...]) -> LeafPage:
    """Re-express ``page``'s definition levels in terms of ``target`` layers."""
    if page.layers == target:
        return page
    target_index = {m: d + 1 for d, m in enumerate(def_meaning(target))}
    src = def_meaning(page.layers)
    table = np.zeros(len(src) + 1, np.uint16)
    for d, m in enumerate(src):
        table[d + 1] = target_index[m]
    if page.def_ is None:
        def_ = None if not def_meaning(target) else np.zeros(page.num_levels, np.uint16)
    else:
        def_ = table[page.def_]
    return LeafPage(page.values, page.num_values, page.rep, def_, page.num_levels, target, page.num_rows, page.dictionary)
