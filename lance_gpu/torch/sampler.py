# SPDX-License-Identifier: Apache-2.0
"""Which rows a (rank, DataLoader worker) reads, and in which order: pylance's samplers.

A sampler turns the dataset's fragments into a :class:`Plan`: a list of :class:`Read`\\ s
(live rows ``[start, stop)`` of one fragment) in reading order, plus, for a filtered
:class:`ShardedBatchSampler`, the stride it keeps of the filtered row stream.

Sharding is over *effective ranks*: with ``W`` DataLoader workers, worker ``w`` of rank ``r``
of ``N`` is effective rank ``r * W + w`` of ``N * W`` (what pylance calls the global rank), so
every row is read once per epoch across all ranks and workers.  A randomized sampler shuffles
its units with ``random.Random(seed + epoch)`` (the same on every rank, so the shards stay a
partition; at epoch 0 the order is pylance's ``random.seed(seed); random.shuffle(units)``).

* :class:`ShardedFragmentSampler`: fragments ``units[rank::world_size]``, each read whole.
* :class:`ShardedBatchSampler`: ranges of ``batch_size`` live rows across the dataset,
  ``units[rank::world_size]``, one batch each; with a filter, every ``world_size``-th row of the
  filtered stream starting at ``rank`` (as pylance; every rank reads the whole dataset).
* :class:`FullScanSampler`: every fragment in order, on every rank (DataLoader workers still
  split the fragments between them).
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from lance_gpu.torch._pipeline import arrow_batch, host_pieces
from lance_gpu.torch._plan import Plan, Read
from lance_gpu.torch._source import RowSource

__all__ = ["FullScanSampler", "Plan", "Read", "Sampler", "ShardedBatchSampler", "ShardedFragmentSampler", "worker_shard"]


def worker_shard() -> tuple[int, int]:
    """``(worker id, workers)`` of the current DataLoader worker; ``(0, 1)`` outside one."""
    import torch.utils.data

    info = torch.utils.data.get_worker_info()
    return (0, 1) if info is None else (int(info.id), int(info.num_workers))


def _effective(rank: int, world_size: int) -> tuple[int, int]:
    wid, nw = worker_shard()
    return rank * nw + wid, world_size * nw


class Sampler(ABC):
    """Base of the samplers: ``sampler(ds, batch_size=, columns=, filter=, with_row_id=)``
    yields ``pyarrow.RecordBatch``\\ es as pylance's samplers do; :class:`LanceDataset`
    uses :meth:`plan` directly."""

    def __init__(self, rank: int = 0, world_size: int = 1, randomize: bool = False, seed: int = 0) -> None:
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")
        self._rank = int(rank)
        self._world_size = int(world_size)
        self._randomize = bool(randomize)
        self._seed = int(seed)
        self._epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Reshuffle (when randomized) for ``epoch``."""
        self._epoch = int(epoch)

    @classmethod
    def from_torch(cls, randomize: bool = False, seed: int = 0):
        """Rank and world size from :mod:`torch.distributed` (0 and 1 when not initialized)."""
        rank, world = dist_rank_world()
        return cls(rank, world, randomize=randomize, seed=seed)

    def _shuffled(self, units: list) -> list:
        if self._randomize:
            random.Random(self._seed + self._epoch).shuffle(units)
        return units

    @abstractmethod
    def plan(self, source, batch_size: int) -> Plan:
        """The reads of this rank (and DataLoader worker) for the current epoch."""

    def __call__(
        self,
        ds,
        *args: Any,
        batch_size: int = 128,
        columns: list[str] | None = None,
        filter: str | None = None,  # noqa: A002
        batch_readahead: int = 16,
        with_row_id: bool = False,
        **kwargs: Any,
    ) -> Iterator[pa.RecordBatch]:
        source = RowSource(ds, columns, filter, with_row_id)
        for pieces in host_pieces(source, self.plan(source, batch_size), batch_size=batch_size, prefetch=2):
            yield arrow_batch(pieces)


class ShardedFragmentSampler(Sampler):
    """Fragments ``[rank::world_size]`` (after a seeded shuffle when ``randomize``)."""

    def plan(self, source, batch_size: int) -> Plan:
        frags = list(enumerate(source.fragments()))
        units = self._shuffled(frags)
        rank, world = _effective(self._rank, self._world_size)
        mine = units[rank::world]
        return Plan([Read(pos, 0, n) for pos, (_fid, n) in mine if n], units=mine)


class FullScanSampler(ShardedFragmentSampler):
    """Every fragment, in order (DataLoader workers split them)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(0, 1)

    def plan(self, source, batch_size: int) -> Plan:
        wid, nw = worker_shard()
        frags = list(enumerate(source.fragments()))[wid::nw]
        return Plan([Read(pos, 0, n) for pos, (_fid, n) in frags if n], units=frags)


class ShardedBatchSampler(Sampler):
    """Ranges of ``batch_size`` rows, ``[rank::world_size]`` (shuffled when ``randomize``)."""

    def plan(self, source, batch_size: int) -> Plan:
        rank, world = _effective(self._rank, self._world_size)
        frags = source.fragments()
        if source.filtered:
            whole = [Read(pos, 0, n) for pos, (_fid, n) in enumerate(frags) if n]
            return Plan(whole, stride=(rank, world))
        total = source.num_rows
        ranges = [(s, min(s + batch_size, total)) for s in range(rank * batch_size, total, world * batch_size)]
        if self._randomize:
            # The same shuffle as pylance (which shuffles this rank's ranges); ours varies per epoch.
            random.Random(self._seed + self._epoch).shuffle(ranges)
        starts = [0]
        for _fid, n in frags:
            starts.append(starts[-1] + n)
        reads: list[Read] = []
        for lo, hi in ranges:
            pieces = []
            for pos in range(len(frags)):
                a, b = max(lo, starts[pos]), min(hi, starts[pos + 1])
                if a < b:
                    pieces.append(Read(pos, a - starts[pos], b - starts[pos]))
            pieces[-1] = Read(pieces[-1].pos, pieces[-1].start, pieces[-1].stop, flush=True)
            reads += pieces
        return Plan(reads, units=ranges)


def dist_rank_world() -> tuple[int, int]:
    """``(rank, world_size)`` from :mod:`torch.distributed`, ``(0, 1)`` when not initialized."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()), int(dist.get_world_size())
    return 0, 1
