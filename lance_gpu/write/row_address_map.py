# SPDX-License-Identifier: Apache-2.0
"""Where a compaction moved each row: old row address -> new row address, for remapping
indices (:mod:`lance_gpu.write.index_remap`, :mod:`lance_gpu.write.vector_index_remap`).

A row address is ``fragment_id << 32 | row offset``; a deleted row maps to ``2**64 - 1``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from lance_gpu._proto import table_pb2

__all__ = ["DELETED_ROW", "RowAddressMap"]

#: The new address of a row the compaction dropped (deleted).
DELETED_ROW = np.uint64(np.iinfo(np.uint64).max)


@dataclass
class RowAddressMap:
    """Old row address -> new row address of every physical row of the rewritten fragments
    (``new`` is ``2**64 - 1`` for a deleted row).  ``old`` is sorted."""

    old: np.ndarray  # uint64
    new: np.ndarray  # uint64

    @classmethod
    def build(
        cls,
        groups: Iterable[tuple[Sequence[tuple[int, int, np.ndarray | None]], Sequence[table_pb2.DataFragment]]],
    ) -> RowAddressMap:
        """``groups``: per rewrite group, its old fragments as ``(id, physical rows, live
        row offsets or None for all)`` in the order their rows were written, and the new
        fragments (ids assigned) that hold those live rows in that order."""
        olds, news = [], []
        for old_frags, new_frags in groups:
            sizes = np.array([int(f.physical_rows) for f in new_frags], np.int64)
            starts = np.concatenate([[0], np.cumsum(sizes)])
            new_ids = np.array([int(f.id) for f in new_frags], np.uint64)
            pos = 0
            for frag_id, physical, live in old_frags:
                keys = (np.uint64(frag_id) << np.uint64(32)) + np.arange(physical, dtype=np.uint64)
                vals = np.full(physical, DELETED_ROW, np.uint64)
                rows = np.arange(physical, dtype=np.int64) if live is None else np.asarray(live, np.int64)
                p = pos + np.arange(rows.size, dtype=np.int64)
                k = np.searchsorted(starts, p, side="right") - 1
                if rows.size and (k.min() < 0 or k.max() >= sizes.size):
                    raise AssertionError("compaction wrote fewer rows than its fragments hold")
                vals[rows] = (new_ids[k] << np.uint64(32)) + (p - starts[k]).astype(np.uint64)
                pos += rows.size
                olds.append(keys)
                news.append(vals)
            if pos != int(starts[-1]):
                raise AssertionError(f"compaction wrote {int(starts[-1])} rows for {pos} live rows")
        old = np.concatenate(olds) if olds else np.zeros(0, np.uint64)
        new = np.concatenate(news) if news else np.zeros(0, np.uint64)
        order = np.argsort(old, kind="stable")
        return cls(old[order], new[order])

    def apply(self, addrs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(new addresses, keep mask): rows of other fragments keep their address, deleted
        rows of rewritten fragments are dropped."""
        addrs = np.asarray(addrs, np.uint64)
        if self.old.size == 0:
            return addrs, np.ones(addrs.size, np.bool_)
        i = np.minimum(np.searchsorted(self.old, addrs), self.old.size - 1)
        hit = self.old[i] == addrs
        out = np.where(hit, self.new[i], addrs)
        return out, ~(hit & (out == DELETED_ROW))
