# SPDX-License-Identifier: Apache-2.0
"""The host pipeline: a plan's reads -> (prefetch thread) -> units -> batches.

A *unit* is rows that batches are cut from without copying: a record batch of a read (a
read's table, one per chunk) or, with a shuffle buffer, one whole fill of it.  :func:`cut`
turns units into batches (lists of ``(unit, start, stop)`` pieces: one piece, a slice of one
unit, except for a batch that straddles two); the same cutter serves the GPU feed's device
tensors.  Converted to tensors with :func:`lance_gpu.torch.to_tensor`'s rules, a unit without
nulls is converted once and its batches are slices of those tensors
(:func:`converted_batches`); otherwise every batch is converted on its own.

Memory is bounded: at most ``prefetch`` decoded groups of reads of at most
``GROUP_READS * read_rows`` rows in all wait in the queue (a group is one decode: small reads,
a batch sampler's ranges, share it, so each fragment's row selection is long), the shuffle
buffer holds at most ``shuffle_buffer`` rows rounded up to whole batches (filled in a second
thread while the batches of the fill before are handed out: at most three fills are held, the
one handed out, one queued and one being filled), and one unit is being cut; the source's
range reader (:class:`lance_gpu.scan.ranges.RangeReader`) keeps at most
``lance_gpu.scan.ranges.DECODED_BYTES`` of decoded columns besides.  Without a shuffle buffer,
batches are zero-copy slices of the reads (a batch that straddles two units is concatenated).

Order is deterministic: reads are split and (with ``shuffle_reads``) permuted with ``rng``,
and each shuffle buffer's rows are scattered into a permutation drawn from ``rng``; the
producer threads only work ahead, they never reorder.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from lance_gpu.torch._plan import Plan, Read

_DONE = object()
#: ``(unit, start, stop)``: rows ``[start, stop)`` of a unit (see :func:`cut`).
Piece = tuple[Any, int, int]
# Reads decoded together, in ``read_rows`` units: a batch sampler's 1024-row ranges spread over
# every fragment, and a window twice the read size halves the row selections per range
# (decode CPU of a shuffled-batches epoch over 4 fragments 0.44-0.49 s -> 0.34-0.41 s).
GROUP_READS = 2


@dataclass(frozen=True, slots=True)
class Feed:
    """One epoch's feed of one rank and DataLoader worker: what is read (``source``,
    ``plan``) and how it is batched and converted.  :class:`lance_gpu.torch.LanceDataset`
    builds it (``LanceDataset.feed``); the host pipeline here and the GPU feed
    (:mod:`lance_gpu.torch._device_feed`) consume it, and nothing else of the dataset.

    ``shuffle_buffer`` 0 means no row mixing; ``rng`` is set when shuffling; ``convert``
    turns a host ``pyarrow.RecordBatch`` into what the loader yields (None: the batch
    itself); ``tensor_rules`` says ``convert`` applies :func:`lance_gpu.torch.to_tensor`'s
    rules with ``nulls`` and no decode hook, which the GPU feed applies to device columns
    itself.  ``fragment_edges`` cuts batches as pylance's loader does (:func:`cut`): the
    plan's reads then flush at every fragment end.
    """

    source: Any
    plan: Plan
    batch_size: int
    drop_last: bool
    shuffle_buffer: int
    rng: np.random.Generator | None
    shuffle_reads: bool
    read_rows: int
    prefetch: int
    nulls: str
    convert: Callable[[pa.RecordBatch], Any] | None
    tensor_rules: bool
    fragment_edges: bool = False

    def pieces(self) -> Iterator[list[Piece]]:
        """The feed's batches decoded on the CPU, as pieces of Arrow units (:func:`cut`)."""
        return host_pieces(
            self.source,
            self.plan,
            batch_size=self.batch_size,
            drop_last=self.drop_last,
            shuffle_buffer=self.shuffle_buffer,
            rng=self.rng,
            shuffle_reads=self.shuffle_reads,
            read_rows=self.read_rows,
            prefetch=self.prefetch,
            fragment_edges=self.fragment_edges,
        )

    def host_batches(self) -> Iterator[pa.RecordBatch]:
        """The feed's batches decoded on the CPU, as Arrow (before ``convert``)."""
        return (arrow_batch(p) for p in self.pieces())

    def converted(self) -> Iterator[Any]:
        """The feed's batches decoded on the CPU and converted: under ``tensor_rules`` each
        null-free unit once, its batches slices of its tensors (:func:`converted_batches`)."""
        if self.convert is None:
            return self.host_batches()
        if self.tensor_rules:
            return converted_batches(self.pieces(), self.convert)
        convert = self.convert
        return (convert(arrow_batch(p)) for p in self.pieces())


def split_reads(reads: list[Read], read_rows: int, rng: np.random.Generator | None) -> list[Read]:
    """Reads of at most ``read_rows`` rows (a flush stays on the last piece); permuted by
    ``rng`` when given (then batch-sampler flushes lose their meaning and are dropped)."""
    out: list[Read] = []
    for r in reads:
        for a in range(r.start, r.stop, read_rows):
            b = min(a + read_rows, r.stop)
            out.append(Read(r.pos, a, b, r.flush and b == r.stop))
    if rng is not None and out:
        out = [Read(r.pos, r.start, r.stop) for r in (out[i] for i in rng.permutation(len(out)))]
    return out


def _produce(items: Iterator, q: queue.Queue, stop: threading.Event, context: Callable[[], AbstractContextManager] | None) -> None:
    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    try:
        with context() if context is not None else contextlib.nullcontext():
            for item in items:
                if not put(item):
                    return
        put(_DONE)
    except BaseException as exc:
        put(exc)


def in_background(
    items: Iterator, depth: int, name: str, *, context: Callable[[], AbstractContextManager] | None = None
) -> Iterator:
    """``items`` produced in a thread, at most ``depth`` ahead of the consumer (bounded
    memory); an exception there is raised here; stopping early stops the thread.

    ``context``: a factory of a context manager entered in the producer thread around the
    whole production (the GPU feed decodes under a side CUDA stream this way); with
    ``depth <= 0`` the items are produced in the caller's thread, inside it too."""
    if depth <= 0:
        with context() if context is not None else contextlib.nullcontext():
            yield from items
        return
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    worker = threading.Thread(target=_produce, args=(items, q, stop, context), daemon=True, name=name)
    worker.start()
    try:
        while True:
            item = q.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        worker.join()


def _grouped(reads: list[Read], group_rows: int) -> Iterator[list[Read]]:
    """Consecutive reads of at most ``group_rows`` rows in all (a read alone may be larger)."""
    group: list[Read] = []
    rows = 0
    for r in reads:
        n = r.stop - r.start
        if group and rows + n > group_rows:
            yield group
            group, rows = [], 0
        group.append(r)
        rows += n
    if group:
        yield group


def _decode(source, reads: list[Read], group_rows: int) -> Iterator[list[tuple[pa.Table, bool]]]:
    for group in _grouped(reads, group_rows):
        tables = source.read_many([(r.pos, r.start, r.stop) for r in group])
        yield [(t, r.flush) for t, r in zip(tables, group, strict=True)]


def prefetched(source, reads: list[Read], prefetch: int, group_rows: int = 32_768) -> Iterator[tuple[pa.Table, bool]]:
    """``(table, flush)`` per read, decoded up to ``prefetch`` groups of reads (of at most
    ``group_rows`` rows; small reads share one decode) ahead in a thread."""
    for group in in_background(_decode(source, reads, group_rows), prefetch, "lance-gpu-torch-read"):
        yield from group


def strided(
    stream: Iterator[tuple[Any, bool]], stride: tuple[int, int], length: Callable[[Any], int], every: Callable[[Any, int, int], Any]
) -> Iterator[tuple[Any, bool]]:
    """Rows ``first, first + step, ...`` of the concatenated stream; ``every(rows, offset,
    step)`` picks rows ``offset, offset + step, ...`` of one item (of ``length(rows)`` rows)."""
    first, step = stride
    seen = 0
    for rows, flush in stream:
        n = length(rows)
        offset = (first - seen) % step
        if offset < n:
            yield every(rows, offset, step), flush
        seen += n


def _every(table: pa.Table, offset: int, step: int) -> pa.Table:
    return table.take(pa.array(np.arange(offset, table.num_rows, step, dtype=np.int64)))


def cut(
    stream: Iterator[tuple[Any, bool]],
    batch_size: int,
    drop_last: bool,
    length: Callable[[Any], int],
    *,
    fragment_edges: bool = False,
) -> Iterator[list[Piece]]:
    """The batches of a stream of ``(unit, flush)``, in order: each a list of ``(unit, start,
    stop)`` pieces of ``batch_size`` rows in all (one piece unless the batch straddles units).
    A flush ends a batch early; the short batch of a flush or of the stream's end is dropped
    with ``drop_last``.  ``length(unit)`` is its row count.

    With ``fragment_edges`` (flushes at fragment ends), batches are pylance's loader's: each
    fragment's rows cut into runs of ``batch_size`` (the last one short), and consecutive
    runs merged while their rows fit in ``batch_size`` (``lance.torch.data``'s buffering of
    its scanner's batches), so a batch never holds part of a run and is never longer than
    ``batch_size``; ``drop_last`` drops only a short last batch."""
    if not fragment_edges:
        return _cut(stream, batch_size, drop_last, length)
    return _merged_runs(_cut(stream, batch_size, False, length), batch_size, drop_last)


def _cut(stream: Iterator[tuple[Any, bool]], batch_size: int, drop_last: bool, length: Callable[[Any], int]) -> Iterator[list[Piece]]:
    parts: list[Piece] = []
    have = 0
    for rows, flush in stream:
        n = length(rows)
        at = 0
        while at < n:
            take = min(batch_size - have, n - at)
            parts.append((rows, at, at + take))
            have += take
            at += take
            if have == batch_size:
                yield parts
                parts, have = [], 0
        if flush and have:
            if not drop_last:
                yield parts
            parts, have = [], 0
    if have and not drop_last:
        yield parts


def _merged_runs(runs: Iterator[list[Piece]], batch_size: int, drop_last: bool) -> Iterator[list[Piece]]:
    """Consecutive runs joined while their rows fit in ``batch_size`` (see :func:`cut`)."""
    pending: list[Piece] = []
    have = 0
    for run in runs:
        n = sum(b - a for _unit, a, b in run)
        if have and have + n > batch_size:
            yield pending
            pending, have = [], 0
        pending = pending + run
        have += n
    if have and not (drop_last and have < batch_size):
        yield pending


def _record_batches(stream: Iterator[tuple[pa.Table, bool]]) -> Iterator[tuple[pa.RecordBatch | pa.Table, bool]]:
    """Each read's table as its record batches (zero-copy, one per run of aligned chunks),
    the read's flush on the last; an empty read passes as it is (its flush still counts)."""
    for table, flush in stream:
        batches = table.to_batches()
        if not batches:
            yield table, flush
            continue
        for rb in batches[:-1]:
            yield rb, False
        yield batches[-1], flush


def _num_rows(unit: pa.RecordBatch | pa.Table) -> int:
    return unit.num_rows


def arrow_batch(pieces: list[Piece]) -> pa.RecordBatch:
    """One batch of Arrow units' pieces: a zero-copy slice of one unit, or the pieces concatenated."""
    if len(pieces) == 1:
        unit, a, b = pieces[0]
        return unit.slice(a, b - a)
    return pa.Table.from_batches([unit.slice(a, b - a) for unit, a, b in pieces]).combine_chunks().to_batches()[0]


def _has_nulls(arr: pa.Array) -> bool:
    """Nulls in ``arr`` or in the items of its fixed-size lists (extension storage included)."""
    while True:
        if arr.null_count:
            return True
        if isinstance(arr, pa.ExtensionArray):
            arr = arr.storage
            continue
        if not pa.types.is_fixed_size_list(arr.type):
            return False
        d = arr.type.list_size
        arr = arr.values.slice(arr.offset * d, len(arr) * d)


def _slice_converted(value: Any, a: int, b: int) -> Any:
    if isinstance(value, dict):
        return {k: v[a:b] for k, v in value.items()}
    return value[a:b]


def converted_batches(batches: Iterator[list[Piece]], convert: Callable[[pa.RecordBatch], Any]) -> Iterator[Any]:
    """``convert`` (a conversion by :func:`lance_gpu.torch.to_tensor`'s rules, row for row) of
    each batch of Arrow pieces.  A unit free of nulls is converted once, its batches being
    slices of the result: what converting each slice gives, without the per-batch cost.  A
    unit with nulls (whose masks, or ``NullValueError``, depend on the rows of each batch) and a
    batch straddling units are converted batch by batch."""
    unit: Any = None
    whole: Any = None
    for pieces in batches:
        if len(pieces) == 1:
            rows, a, b = pieces[0]
            if a == 0 and b == rows.num_rows:
                yield convert(rows)
                continue
            if rows is not unit:
                unit = rows
                whole = None if any(_has_nulls(c) for c in rows.columns) else convert(rows)
            if whole is not None:
                yield _slice_converted(whole, a, b)
                continue
        yield convert(arrow_batch(pieces))


def host_pieces(
    source,
    plan: Plan,
    *,
    batch_size: int,
    drop_last: bool = False,
    shuffle_buffer: int = 0,
    rng: np.random.Generator | None = None,
    shuffle_reads: bool = False,
    read_rows: int = 65_536,
    prefetch: int = 2,
    fragment_edges: bool = False,
) -> Iterator[list[Piece]]:
    """The batches (as pieces of Arrow units, see :func:`cut`) of ``batch_size`` rows (the last
    may be short unless ``drop_last``) of the plan's reads, decoded on the CPU by ``source``."""
    reads = split_reads(plan.reads, max(int(read_rows), 1), rng if shuffle_reads else None)
    stream = prefetched(source, reads, prefetch, GROUP_READS * max(int(read_rows), 1))
    return batch_pieces(
        stream, plan.stride, batch_size=batch_size, drop_last=drop_last, shuffle_buffer=shuffle_buffer, rng=rng,
        fragment_edges=fragment_edges,
    )


def batch_pieces(
    stream: Iterator[tuple[pa.Table, bool]],
    stride: tuple[int, int] | None,
    *,
    batch_size: int,
    drop_last: bool = False,
    shuffle_buffer: int = 0,
    rng: np.random.Generator | None = None,
    fragment_edges: bool = False,
) -> Iterator[list[Piece]]:
    """The batches of a stream of ``(table, flush)`` reads (whoever decoded them), as pieces of
    units: every ``stride``'s row kept, then cut in order (a flush ends a batch; with
    ``fragment_edges`` as :func:`cut` says), or, with ``shuffle_buffer``, mixed through the
    buffer (each fill a unit)."""
    if stride is not None:
        stream = strided(stream, stride, _num_rows, _every)
    if shuffle_buffer <= 0:
        return cut(_record_batches(stream), batch_size, drop_last, _num_rows, fragment_edges=fragment_edges)
    if rng is None:
        raise ValueError("a shuffle buffer needs an rng")
    # Fills run in a second thread (NumPy releases the GIL while copying rows): the next fill
    # is scattered while this one's batches are consumed, and the threads meet once a fill.
    fills = _shuffled_fills(stream, batch_size, shuffle_buffer, rng)
    return cut(((fill, True) for fill in in_background(fills, 1, "lance-gpu-torch-shuffle")), batch_size, drop_last, _num_rows)


def batches_of(stream: Iterator[tuple[pa.Table, bool]], stride: tuple[int, int] | None, **options: Any) -> Iterator[pa.RecordBatch]:
    """:func:`batch_pieces` (same ``options``) as ``pyarrow.RecordBatch``\\ es."""
    return (arrow_batch(p) for p in batch_pieces(stream, stride, **options))


def _as_rows(arr: pa.Array) -> tuple[np.ndarray, pa.DataType] | pa.Array:
    """``(one void item per row view, type)`` of a null-free fixed-width (or nested
    fixed-size list of fixed-width) array, else the array itself."""
    t = arr.type
    if arr.null_count or isinstance(t, pa.BaseExtensionType):
        return arr
    width = 1
    inner = arr
    while pa.types.is_fixed_size_list(inner.type):
        d = inner.type.list_size
        inner = inner.values.slice(inner.offset * d, len(inner) * d)
        if inner.null_count:
            return arr
        width *= d
    leaf = inner.type
    if isinstance(leaf, pa.BaseExtensionType) or not (pa.types.is_integer(leaf) or pa.types.is_floating(leaf) or pa.types.is_fixed_size_binary(leaf)):
        return arr
    size = leaf.byte_width
    buf = inner.buffers()[1]
    if buf is None:
        return arr
    raw = np.frombuffer(buf, np.uint8, count=len(inner) * size, offset=inner.offset * size)
    # one opaque item per row: a gather copies whole rows
    return raw.view(np.dtype((np.void, width * size))), t


def _from_rows(rows: np.ndarray, t: pa.DataType, n: int) -> pa.Array:
    """Rebuild an array of type ``t`` over gathered row bytes (no copy)."""
    if pa.types.is_fixed_size_list(t):
        d = t.list_size
        child = _from_rows(rows.view(np.uint8).reshape(n * d, -1), t.value_type, n * d)
        return pa.FixedSizeListArray.from_arrays(child, type=t)
    return pa.Array.from_buffers(t, n, [None, pa.py_buffer(np.ascontiguousarray(rows).view(np.uint8))])


#: A fill's rows are scattered by up to this many threads at once (NumPy releases the GIL
#: while it copies), in pieces of at least :data:`SCATTER_ROWS` rows.  Random writes of whole
#: rows are bound by memory latency, which a second thread hides: 64Ki rows of 520 bytes
#: scatter in 5.5 ms on one thread and 3.6 ms on two (the 2-core machine).
SCATTER_THREADS = min(4, os.cpu_count() or 1)
SCATTER_ROWS = 8192
_scatter_pool: tuple[int, ThreadPoolExecutor] | None = None
_scatter_lock = threading.Lock()


def _scatter_threads() -> ThreadPoolExecutor:
    """This process's scatter pool (a DataLoader worker forked from a parent that had one
    makes its own: the parent's threads do not exist in the child)."""
    global _scatter_pool
    pid = os.getpid()
    with _scatter_lock:
        if _scatter_pool is None or _scatter_pool[0] != pid:
            _scatter_pool = (pid, ThreadPoolExecutor(SCATTER_THREADS - 1, thread_name_prefix="lance-gpu-torch-scatter"))
        return _scatter_pool[1]


def _scatter(slots: np.ndarray, dest: np.ndarray, rows: np.ndarray) -> None:
    """``slots[dest] = rows``, split over the scatter threads and this one."""
    pieces = min(SCATTER_THREADS, len(rows) // SCATTER_ROWS)
    if pieces <= 1:
        slots[dest] = rows
        return
    bounds = np.linspace(0, len(rows), pieces + 1).astype(np.int64).tolist()
    pool = _scatter_threads()
    futures = [pool.submit(_scatter_piece, slots, dest[a:b], rows[a:b]) for a, b in itertools.pairwise(bounds[1:])]
    slots[dest[: bounds[1]]] = rows[: bounds[1]]
    for f in futures:
        f.result()


def _scatter_piece(slots: np.ndarray, dest: np.ndarray, rows: np.ndarray) -> None:
    slots[dest] = rows


class _Fill:
    """One shuffle buffer being filled: ``size`` row slots, and row ``i`` of the fill (in
    stream order) bound for slot ``slots[i]``, a seeded permutation drawn when the fill starts.

    Columns that are fixed width (or fixed-size lists of it) and null free in every part are
    scattered into their slots as the parts arrive: that is the one copy of their rows, and a
    full fill's batches are then slices of it.  The other columns keep their Arrow parts and
    are gathered per batch (``take`` of the inverse permutation).  Either way the batches
    hold the rows in slot order, so every column of a batch holds the same rows.

    A fill short of ``size`` (the stream ended) holds its rows in the order of their slots:
    a seeded random order still, gathered rather than sliced.
    """

    def __init__(self, schema: pa.Schema, size: int, rng: np.random.Generator) -> None:
        self.schema = schema
        self.size = size
        self.slots = rng.permutation(size)
        self.have = 0
        self.parts: list[pa.Table] = []
        # per column: the slot buffer (one opaque item per row) and the Arrow type, or None
        self.rows: list[tuple[np.ndarray, pa.DataType] | None] = [None] * len(schema)
        self.arrow: set[int] = set()

    def add(self, table: pa.Table) -> None:
        """Scatter ``table`` (at most ``size - have`` rows) into the next slots."""
        n = table.num_rows
        dest = self.slots[self.have : self.have + n]
        for c, column in enumerate(table.columns):
            if c in self.arrow:
                continue
            at = 0
            for chunk in column.chunks:
                got = _as_rows(chunk)
                if not isinstance(got, tuple):
                    self.arrow.add(c)
                    self.rows[c] = None
                    break
                rows, t = got
                held = self.rows[c]
                if held is None:
                    # from Arrow's pool, which keeps freed pages: a fresh NumPy allocation of
                    # this size is mapped anew each fill and faults in every page
                    slots = np.frombuffer(pa.allocate_buffer(self.size * rows.dtype.itemsize), rows.dtype)
                    held = self.rows[c] = (slots, t)
                _scatter(held[0], dest[at : at + len(chunk)], rows)
                at += len(chunk)
        self.parts.append(table)
        self.have += n

    def record_batch(self) -> pa.RecordBatch:
        """The fill's rows in slot order: views of the scattered columns (a full fill), the
        other columns gathered by the inverse permutation.  A short fill (the stream ended)
        holds the rows of the slots it filled, in slot order (gathered)."""
        n = self.have
        picked: slice | np.ndarray = slice(0, n) if n == self.size else np.sort(self.slots[:n])
        gathered: pa.Array | None = None
        if self.arrow:
            inverse = np.empty(self.size, np.int64)
            inverse[self.slots] = np.arange(self.size)
            gathered = pa.array(inverse[picked])
            table = pa.concat_tables(self.parts) if len(self.parts) > 1 else self.parts[0]
        arrays = []
        for c, held in enumerate(self.rows):
            if held is not None:
                arrays.append(_from_rows(held[0][picked], held[1], n))
            else:
                arrays.append(table.column(c).combine_chunks().take(gathered))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def _shuffled_fills(
    stream: Iterator[tuple[pa.Table, bool]], batch_size: int, buffer_rows: int, rng: np.random.Generator
) -> Iterator[pa.RecordBatch]:
    """Rows mixed through fills of ``buffer_rows`` rows rounded up to whole batches (so no batch
    straddles two fills): each fill's rows are scattered into a seeded permutation of its slots
    as they arrive, and the fill handed out whole, in slot order."""
    size = -(-max(buffer_rows, 1) // batch_size) * batch_size
    fill: _Fill | None = None
    for table, _flush in stream:
        while table.num_rows:
            if fill is None:
                fill = _Fill(table.schema, size, rng)
            take = min(size - fill.have, table.num_rows)
            fill.add(table.slice(0, take) if take < table.num_rows else table)
            table = table.slice(take)
            if fill.have == size:
                yield fill.record_batch()
                fill = None
    if fill is not None and fill.have:
        yield fill.record_batch()
