# SPDX-License-Identifier: Apache-2.0
"""Which fragments an index covers: the ``fragment_bitmap`` of an ``IndexMetadata``.

The bitmap is a portable-format roaring bitmap of fragment ids.  A commit that rewrites
fragments (compaction) moves an index's coverage from the old ids of a rewrite group to the
new ones (:func:`recalculate_fragment_bitmap`, pylance's rule); one that changes indexed
values drops the touched fragments from it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pyroaring import BitMap

from lance_gpu._proto import table_pb2

__all__ = ["fragment_bitmap", "recalculate_fragment_bitmap"]


def fragment_bitmap(index: table_pb2.IndexMetadata) -> BitMap | None:
    """The fragment ids an index covers (portable roaring), None when it stores none."""
    if not index.fragment_bitmap:
        return None
    return BitMap.deserialize(index.fragment_bitmap)


def recalculate_fragment_bitmap(
    old: BitMap, groups: Iterable[tuple[Sequence[table_pb2.DataFragment], Sequence[table_pb2.DataFragment]]]
) -> BitMap:
    """pylance's rule: a rewrite group covered by the index swaps its old fragment ids for
    its new ones; a group the index does not cover changes nothing."""
    new = BitMap(old)
    for old_frags, new_frags in groups:
        ids = [int(f.id) for f in old_frags]
        covered = [i in old for i in ids]
        if any(covered):
            if not all(covered):
                raise AssertionError("a rewrite group mixes indexed and unindexed fragments")
            new.difference_update(BitMap(ids))
            new.update(BitMap(int(f.id) for f in new_frags))
    return new
