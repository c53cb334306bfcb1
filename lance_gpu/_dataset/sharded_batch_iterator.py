# SPDX-License-Identifier: Apache-2.0
"""pylance's ``lance._dataset.sharded_batch_iterator.ShardedBatchIterator``: one shard
(``rank`` of ``world_size``) of a dataset's batches, for data-parallel readers.

Sharding by ``"fragment"`` gives shard ``rank`` the fragments ``rank, rank + world_size,
...`` (in manifest order), each read in batches of ``batch_size``; by ``"batch"`` it gives
the row ranges ``[start, start + batch_size)`` for ``start = rank * batch_size, (rank +
world_size) * batch_size, ...`` over the live rows in scan order (the last may be short),
each read as one take.  pylance deprecates it in favour of its samplers (here
:mod:`lance_gpu.torch`) and warns so; this one warns the same way.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from os import PathLike
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from lance_gpu.dataset import LanceDataset, dataset
from lance_gpu.errors import InvalidArgumentError, UnsupportedFeatureError

__all__ = ["ShardedBatchIterator"]


class ShardedBatchIterator:
    """An iterator of record batches over one shard of a dataset.

    Parameters
    ----------
    data : str, Path or LanceDataset
        The dataset (or its URI).
    rank : int
        This shard's number, ``0 <= rank < world_size``.
    world_size : int
        The number of shards.
    columns : list of str or dict of str to str, optional
        Columns, or output names to SQL expressions (default: every column).
    batch_size : int, default 10240
        Rows per batch.
    granularity : {"fragment", "batch"}, default "fragment"
        Shard whole fragments, or row ranges of ``batch_size``.
    batch_readahead : int, default 8
        Batches decoded ahead (fragment granularity).
    with_row_id : bool, default False
        Add ``_rowid`` (fragment granularity only, as pylance).
    """

    def __init__(self, data: str | PathLike[str] | LanceDataset, rank: int, world_size: int, *,
                 columns: list[str] | dict[str, str] | None = None, batch_size: int = 1024 * 10,
                 granularity: Literal["fragment", "batch"] = "fragment", batch_readahead: int = 8,
                 with_row_id: bool = False) -> None:
        warnings.warn("ShardedBatchIterator is deprecated, use :class:`Sampler` instead", stacklevel=2)
        if not 0 <= int(rank) < int(world_size):
            raise InvalidArgumentError(f"ShardedBatchIterator: rank {rank} is not in [0, world_size={world_size})")
        self._rank, self._world_size = int(rank), int(world_size)
        self._batch_size = int(batch_size)
        self._granularity = granularity
        self._columns = columns
        self._with_row_id = bool(with_row_id)
        self._batch_readahead = int(batch_readahead)
        self._ds = data if isinstance(data, LanceDataset) else dataset(data)

    def _iter_over_fragments(self) -> Iterator[pa.RecordBatch]:
        fragments = self._ds.get_fragments()
        for frag in fragments[self._rank :: self._world_size]:
            yield from frag.to_batches(columns=self._columns, batch_size=self._batch_size,
                                       with_row_id=self._with_row_id, batch_readahead=self._batch_readahead)

    def _iter_over_batches(self) -> Iterator[pa.RecordBatch]:
        if self._with_row_id:
            raise UnsupportedFeatureError("with_row_id is not supported for batch sharding yet")
        total = self._ds.count_rows()
        step = self._world_size * self._batch_size
        for start in range(self._rank * self._batch_size, total, step):
            rows = np.arange(start, min(start + self._batch_size, total), dtype=np.int64)
            yield from self._ds.take(rows, columns=self._columns).combine_chunks().to_batches()

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        if self._granularity == "fragment":
            return self._iter_over_fragments()
        if self._granularity == "batch":
            return self._iter_over_batches()
        raise InvalidArgumentError(f"Unrecognized granularity: {self._granularity}")

    @staticmethod
    def from_torch(data: str | PathLike[str] | LanceDataset, **kwargs: Any) -> ShardedBatchIterator:
        """The shard of this process in a ``torch.distributed`` group (rank and world size
        from it); other arguments as the constructor's."""
        import torch.distributed as dist

        return ShardedBatchIterator(data, dist.get_rank(), dist.get_world_size(), **kwargs)
