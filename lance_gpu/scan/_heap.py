# SPDX-License-Identifier: Apache-2.0
"""Which rows pylance's IVF search keeps as the ``k`` nearest, ties included (a numba loop;
the same loop runs as plain Python while it compiles).

pylance 14 scores the rows of the probed partitions (only the rows its pre-filter selects),
partition by partition in probe order and in storage order within one, into one Rust
``BinaryHeap`` of ``OrderedNode``s ordered by distance alone (a max-heap): while the heap holds
fewer than ``k`` nodes a row is pushed; after that a row replaces the heap's top (``pop`` then
``push``) only when the top's distance is strictly larger.  Which of several rows at the
``k``-th distance survive therefore depends on the heap's layout, not on row ids;
:func:`heap_top_k` replays the same operations with the algorithms of Rust's standard library
(``push``: append, ``sift_up``; ``pop``: the last element moved to the root,
``sift_down_to_bottom``, then ``sift_up``), so the kept set is pylance's (checked against
pylance on integer-valued data, where IVF_SQ distances tie at the k-th place all the time).
Distances compare as float32 (``OrderedFloat``'s total order for numbers; a NaN distance is
treated as +inf here).
"""

from __future__ import annotations

import numpy as np

from cuda_kernels._target import cpu_driver, dual


@dual
def _sift_up(hd, hp, pos, d, p):  # pragma: no cover - compiled
    """Rust's ``sift_up(0, pos)``: place ``(d, p)`` at ``pos`` of the max-heap ``hd``/``hp``
    (distances / positions), moving larger-than parents down while it rises."""
    while pos > 0:
        parent = (pos - 1) // 2
        if d <= hd[parent]:
            break
        hd[pos] = hd[parent]
        hp[pos] = hp[parent]
        pos = parent
    hd[pos] = d
    hp[pos] = p


def _heap_top_k_loop(dist, k, out):
    """Positions (into ``dist``) of the rows the heap keeps, written to ``out[:count]``;
    returns ``count`` (``min(k, dist.size)``).  Compiled by :data:`_heap_top_k`, which runs
    this same function as plain Python while the compiled one is not cached yet."""
    hd = np.empty(k + 1, np.float32)
    hp = np.empty(k + 1, np.int64)
    n = 0
    for i in range(dist.size):
        d = dist[i]
        if d != d:
            d = np.float32(np.inf)
        if n >= k:
            if not hd[0] > d:
                continue
            # pop: the last element to the root, sift_down_to_bottom(0), then sift_up(0, pos)
            n -= 1
            ld = hd[n]
            lp = hp[n]
            if n > 0:
                end = n
                pos = 0
                child = 1
                limit = end - 2 if end >= 2 else 0
                while child <= limit and end >= 2:
                    if hd[child] <= hd[child + 1]:
                        child += 1
                    hd[pos] = hd[child]
                    hp[pos] = hp[child]
                    pos = child
                    child = 2 * pos + 1
                if child == end - 1:
                    hd[pos] = hd[child]
                    hp[pos] = hp[child]
                    pos = child
                _sift_up(hd, hp, pos, ld, lp)
        # push: append, sift_up(0, n)
        _sift_up(hd, hp, n, d, i)
        n += 1
    for j in range(n):
        out[j] = hp[j]
    return n


_heap_top_k = cpu_driver(twin=_heap_top_k_loop)(_heap_top_k_loop)


def heap_ties_at_kth(dist: np.ndarray, k: int) -> bool:
    """Whether rows of equal distance straddle the ``k``-th smallest of ``dist`` (then which
    of them a heap keeps depends on its history, not on the values alone)."""
    if dist.size <= k:
        return False
    clean = np.where(np.isnan(dist), np.float32(np.inf), dist)
    kth = np.partition(clean, k - 1)[k - 1]
    return int(np.count_nonzero(clean <= kth)) != k


def heap_top_k(dist: np.ndarray, k: int, ordered: bool = False) -> np.ndarray:
    """Positions into ``dist`` (float32 distances of the scored rows, in the order pylance scores
    them) of the at most ``k`` rows its heap keeps (see the module docstring):
    ascending, or with ``ordered`` in the heap's own array order (the order pylance emits
    them in).  Without ``ordered``, where no tie straddles the ``k``-th distance the set is
    simply the ``k`` smallest and no loop runs."""
    dist = np.ascontiguousarray(dist, dtype=np.float32)
    if not ordered:
        if dist.size <= k:
            return np.arange(dist.size)
        if not heap_ties_at_kth(dist, k):
            clean = np.where(np.isnan(dist), np.float32(np.inf), dist)
            return np.flatnonzero(clean <= np.partition(clean, k - 1)[k - 1])
    out = np.empty(min(k, dist.size), np.int64)
    count = _heap_top_k(dist, np.int64(k), out)
    return out[:count] if ordered else np.sort(out[:count])
