# SPDX-License-Identifier: Apache-2.0
"""What a decoded page of one leaf column looks like, before structure is applied."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lance_gpu.file.blocks import Block, FixedWidthBlock, concat_blocks

# RepDefLayer values (encodings_v2_1.proto), inner-most layer first in a page's ``layers``.
ALL_VALID_ITEM = 1
ALL_VALID_LIST = 2
NULLABLE_ITEM = 3
NULLABLE_LIST = 4
EMPTYABLE_LIST = 5
NULL_AND_EMPTY_LIST = 6
LIST_LAYERS = (ALL_VALID_LIST, NULLABLE_LIST, EMPTYABLE_LIST, NULL_AND_EMPTY_LIST)


@dataclass(slots=True)
class LeafPage:
    """The decoded content of one page (or several concatenated pages) of a leaf column.

    ``values`` holds the visible items (null items included, null or empty lists not);
    ``rep`` / ``def_`` are u16 levels (None when the layers need none); ``values`` is None
    for an all-null page, whose items are all null.
    """

    values: Block | None
    num_values: int
    rep: np.ndarray | None
    def_: np.ndarray | None
    num_levels: int
    layers: tuple[int, ...]
    num_rows: int
    # Dictionary-encoded (mini-block) pages: the page's dictionary items and, per value in
    # ``values``, its index, so that dictionary-typed columns keep pylance's dictionary.
    dictionary: tuple[Block, np.ndarray] | None = None


def _same_items(a: Block, b: Block) -> bool:
    if a is b:
        return True
    if type(a) is not type(b) or a.num_values != b.num_values:
        return False
    if isinstance(a, FixedWidthBlock):
        return a.bits_per_value == b.bits_per_value and np.array_equal(a.as_bytes(), b.as_bytes())  # type: ignore[union-attr]
    return np.array_equal(a.offsets, b.offsets) and np.array_equal(a.data, b.data)  # type: ignore[union-attr]


def _concat_dictionaries(pages: list[LeafPage]) -> tuple[Block, np.ndarray] | None:
    """The pages' shared dictionary with their indices joined; None if they do not share one."""
    dicts = [p.dictionary for p in pages]
    if any(d is None for d in dicts):
        return None
    items = dicts[0][0]  # type: ignore[index]
    if not all(_same_items(items, d[0]) for d in dicts[1:]):  # type: ignore[index]
        return None
    return items, np.concatenate([d[1] for d in dicts])  # type: ignore[index]


def _levels_or_zeros(pages: list[LeafPage], attr: str) -> np.ndarray | None:
    arrays = [getattr(p, attr) for p in pages]
    if all(a is None for a in arrays):
        return None
    return np.concatenate(
        [a if a is not None else np.zeros(p.num_levels, np.uint16) for a, p in zip(arrays, pages)]
    ).astype(np.uint16, copy=False)


def concat_pages(pages: list[LeafPage], null_block) -> LeafPage:
    """Concatenate pages of one column; ``null_block(n)`` makes filler values for all-null pages."""
    if len(pages) == 1:
        return pages[0]
    layers = max((p.layers for p in pages), key=len)
    values = [p.values if p.values is not None else null_block(p.num_values) for p in pages]
    return LeafPage(
        concat_blocks(values) if values else None,
        sum(p.num_values for p in pages),
        _levels_or_zeros(pages, "rep"),
        _levels_or_zeros(pages, "def_"),
        sum(p.num_levels for p in pages),
        layers,
        sum(p.num_rows for p in pages),
        _concat_dictionaries(pages),
    )
