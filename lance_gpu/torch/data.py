# SPDX-License-Identifier: Apache-2.0
"""PyTorch datasets over Lance datasets: :class:`LanceDataset` (iterable, pylance's signature
plus shuffling, epochs and a device) and :class:`LanceMapDataset` (random access by row)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import torch
import torch.utils.data

import lance_gpu
from lance_gpu._device import gpu_unusable_reason
from lance_gpu.errors import GpuUnavailableError, UnsupportedFeatureError
from lance_gpu.torch._pipeline import Feed
from lance_gpu.torch._source import RowSource
from lance_gpu.torch.sampler import (
    FullScanSampler,
    Plan,
    Read,
    Sampler,
    ShardedBatchSampler,
    ShardedFragmentSampler,
    dist_rank_world,
    worker_shard,
)
from lance_gpu.torch.tensors import to_tensor

DEVICES = ("auto", "cuda", "gpu", "cpu")


def _open(dataset, dataset_options: Mapping[str, Any] | None):
    if isinstance(dataset, lance_gpu.LanceDataset):
        return dataset
    if isinstance(dataset, str | os.PathLike):
        return lance_gpu.dataset(dataset, **dict(dataset_options or {}))
    uri, version = getattr(dataset, "uri", None), getattr(dataset, "version", None)
    if isinstance(uri, str) and isinstance(version, int):
        # a pylance ``lance.LanceDataset`` (what pylance's loader takes): the same version,
        # read by lance_gpu; its storage options are its own, pass them in dataset_options
        return lance_gpu.dataset(uri, version, **dict(dataset_options or {}))
    raise TypeError(f"dataset must be a URI, a lance_gpu.LanceDataset or a pylance dataset, not {type(dataset).__name__}")


def _pin(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.pin_memory()
    if isinstance(value, dict):
        return {k: _pin(v) for k, v in value.items()}
    return value


def resolve_torch_device(device: str) -> str:
    """``"cuda"`` or ``"cpu"`` for ``device``: ``auto`` takes the GPU feed when lance-gpu can
    decode on a GPU and torch sees one."""
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, not {device!r}")
    if device == "cpu":
        return "cpu"

    reason = gpu_unusable_reason()
    if reason is None and not torch.cuda.is_available() and not _simulated():
        reason = "this torch build sees no CUDA device"
    if reason is None:
        return "cuda"
    if device == "auto":
        return "cpu"
    raise GpuUnavailableError(f"device={device!r} requested but the GPU feed cannot run: {reason}")


def _simulated() -> bool:
    """The numba CUDA simulator stands in for the device (CPU torch): tests only."""
    from numba import config

    return bool(getattr(config, "ENABLE_CUDASIM", False))


class LanceDataset(torch.utils.data.IterableDataset):
    """A :class:`torch.utils.data.IterableDataset` yielding batches of a Lance dataset.

    The arguments up to ``auto_detect_rank`` are pylance's ``lance.torch.data.LanceDataset``
    (a script changes only its import); the keyword-only ones after are ours.

    Parameters
    ----------
    dataset : str, os.PathLike, lance_gpu.LanceDataset or lance.LanceDataset
        The dataset (a URI is opened with ``lance_gpu.dataset(uri, **dataset_options)``; a
        pylance dataset's URI is opened at its version the same way, read by lance_gpu).
    batch_size : int
        Rows per batch; every batch is full except the last of each rank and worker
        (dropped with ``drop_last``) and a :class:`ShardedBatchSampler`'s short range.
    dataset_options : dict, optional
        Keyword arguments of ``lance_gpu.dataset`` (``version=``, ``device=``).
    columns : list of str, optional
        Columns to read (default: all).
    filter : str or pyarrow.compute.Expression, optional
        Only rows matching it are read.
    samples : int, optional
        Read ``samples`` rows picked at random (seeded; without a filter).
    cache : optional
        Not supported (raises ``UnsupportedFeatureError`` when set).
    with_row_id : bool, default False
        Append ``_rowid``.
    rank, world_size : int, optional
        This process's rank; default from :mod:`torch.distributed` (0 of 1 when not initialized
        and ``auto_detect_rank``).
    shard_granularity : {"fragment", "batch"}, optional
        :class:`ShardedFragmentSampler` (default) or :class:`ShardedBatchSampler`.
    batch_readahead : int, default 16
        Accepted for pylance compatibility; the read-ahead is ``prefetch``.
    to_tensor_fn : callable, optional
        ``fn(batch, hf_converter=None, use_blob_api=False)`` (pylance's signature); default
        :func:`lance_gpu.torch.to_tensor` with ``nulls`` and ``decode``; None yields
        ``pyarrow.RecordBatch``\\ es.
    sampler : Sampler, optional
        A sampler of :mod:`lance_gpu.torch.sampler` (or any callable with pylance's sampler
        signature, which then bypasses our pipeline).
    auto_detect_rank : bool, default True
        Read rank and world size from :mod:`torch.distributed`; False (and no ``rank``) means
        a :class:`FullScanSampler`.
    shuffle : bool, default False
        Shuffle: units in a seeded order (per epoch), reads in a seeded order, and rows through
        a buffer of ``shuffle_buffer`` rows.
    seed : int, default 0
        Seed of every random choice; the same seed gives the same order.
    drop_last : bool, default False
        Drop the short last batch.
    device : {"auto", "cuda", "cpu"}, default "auto"
        ``cuda``: batches decoded in device memory and handed to torch by DLPack (see
        :mod:`lance_gpu.torch._device_feed`); ``cpu``: zero-copy host tensors; ``auto``: the GPU
        when usable.
    shuffle_buffer : int, default 65536
        Rows the shuffle buffer holds, rounded up to whole batches: each fill of that many
        rows is handed out in a seeded random order before the next one starts (0: no row
        mixing, only the units and reads are shuffled).
    read_rows : int, default 32768
        Rows per read (the unit of the shuffled read order); reads are decoded in groups of up
        to ``2 * read_rows`` rows (the unit of prefetch).
    prefetch : int, default 2
        Reads decoded ahead in a background thread (GPU: batches prepared ahead on a side stream).
    pin_memory : bool, default False
        Host tensors in pinned memory, so ``.cuda(non_blocking=True)`` overlaps the copy
        (ignored with a warning where torch has no CUDA).
    nulls : {"raise", "mask"}, default "raise"
        The null rule of :mod:`lance_gpu.torch.tensors`.
    decode : dict of str to callable, optional
        Per-column conversion hooks (images, text...).
    batch_edges : {"exact", "fragment"}, default "exact"
        ``"exact"``: every batch holds ``batch_size`` rows, across fragment ends.
        ``"fragment"``: pylance's batches, for code that counts on them: each fragment's rows
        in runs of ``batch_size`` (its last run short), consecutive runs joined while they fit
        in ``batch_size`` (in order; not with ``shuffle``; a :class:`ShardedBatchSampler`'s
        batches are its ranges either way).  Without a filter the sizes equal pylance's; with
        one, runs are cut after filtering where pylance cuts before.
    """

    def __init__(
        self,
        dataset,
        batch_size: int,
        *args: Any,
        dataset_options: dict[str, Any] | None = None,
        columns: list[str] | dict[str, str] | None = None,
        filter: str | None = None,  # noqa: A002
        samples: int | None = 0,
        cache: str | bool | None = None,
        with_row_id: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
        shard_granularity: Literal["fragment", "batch"] | None = None,
        batch_readahead: int = 16,
        to_tensor_fn: Callable[..., Any] | None = to_tensor,
        sampler: Sampler | Callable[..., Any] | None = None,
        auto_detect_rank: bool = True,
        shuffle: bool = False,
        seed: int = 0,
        drop_last: bool = False,
        device: str = "auto",
        shuffle_buffer: int = 65_536,
        read_rows: int = 32_768,
        prefetch: int = 2,
        pin_memory: bool = False,
        nulls: str = "raise",
        decode: Mapping[str, Callable[[pa.Array], Any]] | None = None,
        batch_edges: Literal["exact", "fragment"] = "exact",
        **kwargs: Any,
    ) -> None:
        super().__init__()
        if cache:
            raise UnsupportedFeatureError("cache= is not supported by lance_gpu.torch.LanceDataset")
        if isinstance(columns, dict):
            raise UnsupportedFeatureError("columns as a dict of SQL expressions is not supported; pass column names")
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, not {batch_size}")
        if shard_granularity not in (None, "fragment", "batch"):
            raise ValueError(f"Invalid shard_granularity: {shard_granularity!r}")
        if device not in DEVICES:
            raise ValueError(f"device must be one of {DEVICES}, not {device!r}")
        if batch_edges not in ("exact", "fragment"):
            raise ValueError(f"batch_edges must be 'exact' or 'fragment', not {batch_edges!r}")
        if batch_edges == "fragment" and shuffle:
            raise ValueError("batch_edges='fragment' gives pylance's in-order batches; it cannot be combined with shuffle=True")
        self.dataset = _open(dataset, dataset_options)
        self.batch_size = int(batch_size)
        self.columns = list(columns) if columns is not None else None
        self.filter = filter
        self.samples = int(samples or 0)
        self.with_row_id = bool(with_row_id)
        self.rank = rank
        self.world_size = world_size
        self.shard_granularity = shard_granularity
        self.batch_readahead = batch_readahead
        self.sampler = sampler
        self.auto_detect_rank = auto_detect_rank
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        self.device = device
        self.shuffle_buffer = int(shuffle_buffer)
        self.read_rows = int(read_rows)
        self.prefetch = int(prefetch)
        self.nulls = nulls
        self.decode = dict(decode or {})
        self.batch_edges = batch_edges
        self._to_tensor_fn = to_tensor_fn
        self.epoch = 0
        if pin_memory and not torch.cuda.is_available():
            warnings.warn("pin_memory=True ignored: this torch build has no CUDA", UserWarning, stacklevel=2)
            pin_memory = False
        self.pin_memory = bool(pin_memory)
        self._source = RowSource(self.dataset, self.columns, filter, self.with_row_id)
        if self.samples and filter is not None:
            raise UnsupportedFeatureError("samples= with a filter is not supported")

    def __repr__(self) -> str:
        return f"LanceGpuTorchDataset({self.dataset.uri}, batch_size={self.batch_size}, shuffle={self.shuffle})"

    @property
    def schema(self) -> pa.Schema:
        return self._source.schema()

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch``'s order (a shuffled feed differs per epoch; call before each)."""
        self.epoch = int(epoch)
        set_epoch = getattr(self.sampler, "set_epoch", None)
        if set_epoch is not None:
            set_epoch(self.epoch)

    def resolved_sampler(self) -> Sampler | Callable[..., Any]:
        """The sampler this rank uses (pylance's choice when none was given)."""
        if self.sampler is not None:
            return self.sampler
        if self.rank is not None:
            rank: int | None = self.rank
            world: int | None = self.world_size if self.world_size is not None else 1
        elif self.auto_detect_rank:
            rank, world = dist_rank_world()
            if self.world_size is not None:
                world = self.world_size
        else:
            rank, world = None, None
        if self.shard_granularity == "batch":
            s: Sampler = ShardedBatchSampler(rank or 0, world or 1, randomize=self.shuffle, seed=self.seed)
        elif rank is None:
            s = FullScanSampler()
        else:
            s = ShardedFragmentSampler(rank, world or 1, randomize=self.shuffle, seed=self.seed)
        s.set_epoch(self.epoch)
        return s

    def _rng(self) -> np.random.Generator:
        wid, nw = worker_shard()
        rank = self.rank if self.rank is not None else dist_rank_world()[0]
        return np.random.default_rng([self.seed, self.epoch, rank, wid, nw])

    def feed(self, sampler: Sampler | Callable[..., Any] | None = None) -> Feed:
        """This rank's and DataLoader worker's feed for the current epoch (what the host
        pipeline and the GPU feed run); ``sampler`` defaults to :meth:`resolved_sampler`."""
        if sampler is None:
            sampler = self.resolved_sampler()
        if not isinstance(sampler, Sampler):
            raise UnsupportedFeatureError("a sampler that is not a lance_gpu.torch Sampler has no read plan")
        plan = sampler.plan(self._source, self.batch_size)
        fragment_edges = self.batch_edges == "fragment" and not isinstance(sampler, ShardedBatchSampler)
        if fragment_edges:
            # a fragment sampler's reads are whole fragments: each ends a run
            plan = Plan([Read(r.pos, r.start, r.stop, flush=True) for r in plan.reads], plan.stride, plan.units)
        return Feed(
            source=self._source,
            plan=plan,
            batch_size=self.batch_size,
            drop_last=self.drop_last,
            shuffle_buffer=self.shuffle_buffer if self.shuffle else 0,
            rng=self._rng() if self.shuffle else None,
            shuffle_reads=self.shuffle and plan.stride is None and not isinstance(sampler, ShardedBatchSampler),
            read_rows=self.read_rows,
            prefetch=self.prefetch,
            nulls=self.nulls,
            convert=None if self._to_tensor_fn is None else self._convert,
            tensor_rules=self._to_tensor_fn is to_tensor and not self.decode,
            fragment_edges=fragment_edges,
        )

    def arrow_batches(self) -> Iterator[pa.RecordBatch]:
        """The batches of this rank and worker as ``pyarrow.RecordBatch``\\ es (host path)."""
        sampler = self.resolved_sampler()
        if self.samples:
            yield from self._sampled()
            return
        if not isinstance(sampler, Sampler):
            yield from sampler(
                self.dataset,
                batch_size=self.batch_size,
                columns=self.columns,
                filter=self.filter,
                batch_readahead=self.batch_readahead,
                with_row_id=self.with_row_id,
            )
            return
        yield from self.feed(sampler).host_batches()

    def _sampled(self) -> Iterator[pa.RecordBatch]:
        """``samples`` distinct rows chosen with the seed (the same on every rank), split
        between the effective ranks, read with takes of a batch each."""
        total = self._source.num_rows
        n = min(self.samples, total)
        chosen = np.random.default_rng([self.seed, self.epoch]).choice(total, n, replace=False)
        rank, world = dist_rank_world() if self.rank is None else (self.rank, self.world_size or 1)
        wid, nw = worker_shard()
        mine = chosen[rank * nw + wid :: world * nw]
        stop = len(mine) - (len(mine) % self.batch_size if self.drop_last else 0)
        for i in range(0, stop, self.batch_size):
            table = self._source.take(mine[i : i + self.batch_size])
            yield table.combine_chunks().to_batches()[0]

    def _convert(self, batch: pa.RecordBatch) -> Any:
        fn = self._to_tensor_fn
        if fn is None:
            return batch
        if fn is to_tensor:
            out = to_tensor(batch, nulls=self.nulls, decode=self.decode)
        else:
            out = fn(batch, hf_converter=None, use_blob_api=False)
        return _pin(out) if self.pin_memory else out

    def __iter__(self) -> Iterator[Any]:
        if resolve_torch_device(self.device) == "cuda" and not self.samples:
            from lance_gpu.torch._device_feed import device_batches

            yield from device_batches(self.feed())
            return
        sampler = self.resolved_sampler()
        if self.samples or not isinstance(sampler, Sampler):
            for batch in self.arrow_batches():
                yield self._convert(batch)
            return
        yield from self.feed(sampler).converted()


def identity_collate(batch: Any) -> Any:
    """``collate_fn`` for :class:`LanceMapDataset` with a batch sampler (the rows already
    arrive as one converted batch)."""
    return batch


class LanceMapDataset(torch.utils.data.Dataset):
    """Random access for map-style training: ``ds[i]`` is row ``i`` (of the live rows, in
    dataset order) and ``ds.__getitems__(indices)`` one converted batch, read with one
    ``take`` that decodes only the pages holding those rows.

    With a ``DataLoader(ds, batch_size=B, sampler=..., collate_fn=identity_collate)`` every
    step is one take of ``B`` rows.

    Parameters
    ----------
    dataset : str, os.PathLike, lance_gpu.LanceDataset or lance.LanceDataset
        The dataset (as :class:`LanceDataset`).
    columns : list of str, optional
        Columns to read.
    with_row_id : bool, default False
        Append ``_rowid``.
    to_tensor_fn : callable, optional
        As :class:`LanceDataset` (None gives ``pyarrow.Table``\\ s).
    nulls, decode
        As :class:`LanceDataset`.
    dataset_options : dict, optional
        Keyword arguments of ``lance_gpu.dataset``.
    """

    def __init__(
        self,
        dataset,
        *,
        columns: Sequence[str] | None = None,
        with_row_id: bool = False,
        to_tensor_fn: Callable[..., Any] | None = to_tensor,
        nulls: str = "raise",
        decode: Mapping[str, Callable[[pa.Array], Any]] | None = None,
        dataset_options: dict[str, Any] | None = None,
    ) -> None:
        self.dataset = _open(dataset, dataset_options)
        self._source = RowSource(self.dataset, columns, None, with_row_id)
        self._to_tensor_fn = to_tensor_fn
        self.nulls = nulls
        self.decode = dict(decode or {})

    def __len__(self) -> int:
        return self._source.num_rows

    def _convert(self, table: pa.Table) -> Any:
        fn = self._to_tensor_fn
        if fn is None:
            return table
        batch = table.combine_chunks().to_batches()[0] if table.num_rows else pa.RecordBatch.from_pylist([], schema=table.schema)
        if fn is to_tensor:
            return to_tensor(batch, nulls=self.nulls, decode=self.decode)
        return fn(batch, hf_converter=None, use_blob_api=False)

    def __getitem__(self, index: int) -> Any:
        n = len(self)
        i = int(index)
        if i < -n or i >= n:
            raise IndexError(f"index {index} out of range for {n} rows")
        out = self._convert(self._source.take(np.array([i % n])))
        if isinstance(out, dict):
            return {k: v[0] for k, v in out.items()}
        return out[0]

    def __getitems__(self, indices: Sequence[int]) -> Any:
        return self._convert(self._source.take(np.asarray(indices, np.int64)))


class SafeLanceDataset(torch.utils.data.Dataset):
    """pylance's ``lance.torch.data.SafeLanceDataset``: a map-style dataset safe to pickle into
    spawned DataLoader workers.  The parent opens the dataset only to count its rows; each
    worker opens it on its first batch (nothing open crosses the process boundary), and a batch
    of indices is one ``take`` returned as a list of row dicts (``to_pylist``), as pylance's.

    Parameters
    ----------
    uri : str or os.PathLike
        The dataset.
    dataset_options : dict, optional
        Keyword arguments of ``lance_gpu.dataset`` (``version=``, ``storage_options=``, ...).
    """

    def __init__(self, uri: str | os.PathLike, *, dataset_options: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.uri = uri
        self.dataset_options = dict(dataset_options or {})
        self._len = _open(uri, self.dataset_options).count_rows()
        self._ds: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_ds": None}

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, idx: int) -> dict[str, Any]:
        return self.__getitems__([idx])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """The rows at ``indices`` (positions among the live rows) as a list of dicts."""
        if self._ds is None:
            self._ds = _open(self.uri, self.dataset_options)
        return self._ds.take(list(indices)).to_pylist()


def get_safe_loader(dataset: Any, batch_size: int = 32, num_workers: int = 4, **kwargs: Any) -> torch.utils.data.DataLoader:
    """pylance's ``lance.torch.data.get_safe_loader``: a ``DataLoader`` over ``dataset`` with
    spawned workers (``multiprocessing_context="spawn"``) and ``persistent_workers=True`` unless
    given; every other keyword argument is the ``DataLoader``'s and overrides these defaults.

    Parameters
    ----------
    dataset : torch.utils.data.Dataset
        Usually a :class:`SafeLanceDataset`.
    batch_size : int, default 32
    num_workers : int, default 4
    **kwargs
        More ``DataLoader`` arguments.
    """
    options: dict[str, Any] = {
        "batch_size": batch_size,
        "num_workers": num_workers,
        "persistent_workers": kwargs.pop("persistent_workers", True),
        "multiprocessing_context": torch.multiprocessing.get_context("spawn"),
        **kwargs,
    }
    return torch.utils.data.DataLoader(dataset, **options)
