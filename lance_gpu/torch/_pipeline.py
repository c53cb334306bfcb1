# SPDX-License-Identifier: Apache-2.0
"""The host pipeline: a plan's reads -> (prefetch thread) -> shuffle buffer -> batches.

Memory is bounded: at most ``prefetch`` decoded reads of at most ``read_rows`` rows wait in
the queue, the shuffle buffer holds at most ``shuffle_buffer + batch_size`` rows, and one
batch is being handed out.  Without a shuffle buffer, batches are zero-copy slices of the
reads (a batch that straddles two reads is concatenated).

Order is deterministic: reads are split and (with ``shuffle_reads``) permuted with ``rng``,
and each full shuffle buffer is permuted once with ``rng``; the producer thread only reads
ahead, it never reorders.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from lance_gpu.torch.sampler import Plan, Read

_DONE = object()


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


def _produce(source, reads: list[Read], q: queue.Queue, stop: threading.Event) -> None:
    try:
        for r in reads:
            table = source.read(r.pos, r.start, r.stop)
            while not stop.is_set():
                try:
                    q.put((table, r.flush), timeout=0.1)
                    break
                except queue.Full:
                    continue
            if stop.is_set():
                return
        item: object = _DONE
    except BaseException as exc:  # handed to the consumer, raised there
        item = exc
    while not stop.is_set():
        try:
            q.put(item, timeout=0.1)
            return
        except queue.Full:
            continue


def prefetched(source, reads: list[Read], prefetch: int) -> Iterator[tuple[pa.Table, bool]]:
    """``(table, flush)`` per read, decoded up to ``prefetch`` reads ahead in a thread."""
    if prefetch <= 0:
        for r in reads:
            yield source.read(r.pos, r.start, r.stop), r.flush
        return
    q: queue.Queue = queue.Queue(maxsize=prefetch)
    stop = threading.Event()
    worker = threading.Thread(target=_produce, args=(source, reads, q, stop), daemon=True, name="lance-gpu-torch-prefetch")
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


def _strided(stream: Iterator[tuple[pa.Table, bool]], stride: tuple[int, int]) -> Iterator[tuple[pa.Table, bool]]:
    """Rows ``first, first + step, ...`` of the concatenated stream."""
    first, step = stride
    seen = 0
    for table, flush in stream:
        n = table.num_rows
        offset = (first - seen) % step
        if offset < n:
            yield table.take(pa.array(np.arange(offset, n, step, dtype=np.int64))), flush
        seen += n


def _one_batch(parts: list[pa.Table]) -> pa.RecordBatch:
    table = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
    batches = table.combine_chunks().to_batches() if table.num_rows else []
    if len(batches) == 1:
        return batches[0]
    return pa.RecordBatch.from_pylist([], schema=table.schema) if not batches else pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def host_batches(
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
) -> Iterator[pa.RecordBatch]:
    """Batches of ``batch_size`` rows (the last may be short unless ``drop_last``)."""
    reads = split_reads(plan.reads, max(int(read_rows), 1), rng if shuffle_reads else None)
    stream = prefetched(source, reads, prefetch)
    if plan.stride is not None:
        stream = _strided(stream, plan.stride)
    if shuffle_buffer > 0:
        if rng is None:
            raise ValueError("a shuffle buffer needs an rng")
        yield from _shuffled_batches(stream, batch_size, drop_last, shuffle_buffer, rng)
        return
    parts: list[pa.Table] = []
    have = 0
    for table, flush in stream:
        while table.num_rows:
            take = min(batch_size - have, table.num_rows)
            parts.append(table.slice(0, take))
            have += take
            table = table.slice(take)
            if have == batch_size:
                yield _one_batch(parts)
                parts, have = [], 0
        if flush and have:
            if not drop_last:
                yield _one_batch(parts)
            parts, have = [], 0
    if have and not drop_last:
        yield _one_batch(parts)


def _shuffled_batches(
    stream: Iterator[tuple[pa.Table, bool]], batch_size: int, drop_last: bool, buffer_rows: int, rng: np.random.Generator
) -> Iterator[pa.RecordBatch]:
    """Fill a buffer of ``buffer_rows`` rows, permute it, hand out full batches; the rows left
    over (fewer than a batch) join the next buffer."""
    parts: list[pa.Table] = []
    have = 0

    def drain(final: bool) -> Iterator[pa.RecordBatch]:
        nonlocal parts, have
        table = pa.concat_tables(parts).combine_chunks() if len(parts) > 1 else parts[0].combine_chunks()
        perm = rng.permutation(table.num_rows)
        full = (table.num_rows // batch_size) * batch_size
        for i in range(0, full, batch_size):
            yield _one_batch([table.take(pa.array(perm[i : i + batch_size]))])
        rest = perm[full:]
        parts, have = ([table.take(pa.array(rest))], rest.size) if rest.size else ([], 0)
        if final and have:
            if not drop_last:
                yield _one_batch(parts)
            parts, have = [], 0

    for table, _flush in stream:
        if table.num_rows:
            parts.append(table)
            have += table.num_rows
        if have >= buffer_rows:
            yield from drain(False)
    if have:
        yield from drain(True)
