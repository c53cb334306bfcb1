# SPDX-License-Identifier: Apache-2.0
"""Staging: the file bytes a read needs, gathered into pinned host memory and sent to the
device in a few large transfers.

Planning registers every byte range it needs (page buffers of the requested columns, read
zero-copy from the memory-mapped data files) and every small host-made *blob* (dictionary
items decoded on the host, constant values, levels of constant pages) with a
:class:`Stager`, which gives each a 64-byte aligned position in one device *arena*.
:meth:`Stager.upload` then fills pinned slabs of :data:`SLAB_BYTES` from the ranges and
copies each to the arena asynchronously, on a stream, while the host fills the next slab
(two slabs, double buffering): disk/page-cache reads overlap the PCIe transfers, and the
decoded data never comes back to the host.

Byte ranges registered with :meth:`Stager.add_range` are not read at planning time: the
slab fill reads them with the store's ``read_ranges_into`` straight into the pinned slab (a
copy out of the memory map locally; obstore's response buffers copied into the slab for
remote stores), so remote bytes land in the staging buffers without an intermediate array.
Neighbouring page buffers of one memory-mapped file are gathered as one range: a buffer
registered right after another of the same file (:meth:`Stager.add_buffer` with the file's
map, or many at once with :meth:`Stager.add_file_buffers`) that starts at most
:data:`STAGE_GAP` bytes after it, at the same offset modulo :data:`ALIGN`, extends that item
(the gap's bytes are copied too), so a read of many pages fills the slabs with a few large
copies, not one per chunk buffer; every buffer keeps an :data:`ALIGN`-aligned position.
A range may carry a ``land`` callback, run once on all its bytes as they lie in the pinned
memory, before they are copied to the device: the planner parses the in-band chunk headers
of mini-block pages there (validating them, and emitting the work that depends on them), so
those pages are planned from their chunk metadata alone and fetched once, into the slab.

The copy streams are non-blocking CuPy streams where CuPy is in use, so that a unit staged
from another thread (:func:`lance_gpu.gpu.read.scan_device` stages the next unit while the
current one decodes) copies while kernels run on the legacy stream.  :meth:`Stager.upload`
does not wait for its last copies: it records an event on each copy stream, and the decode
of the unit makes its stream wait for them (:meth:`Stager.wait_ready`), so the staging
thread goes on to the next unit while the copies drain and the kernels start right after.  The arena is allocated
on the first copy stream, so a pooled allocator orders its reuse with those copies; the
reader synchronises the legacy stream after decoding a unit, before its arena is freed.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from cuda_kernels._device import is_simulator
from lance_gpu.gpu import _array
from lance_gpu.io.store import ObjectStore, read_ranges_into

ALIGN = 64
#: a page buffer of a mapped file starting at most this many bytes after the last staged
#: range of the same file is staged with it, the gap's bytes too (one item, one copy)
STAGE_GAP = 4096
SLAB_BYTES = 32 << 20
# A slab is filled by this many threads (NumPy copies release the GIL; one thread's memcpy
# from the page cache does not keep up with PCIe): up to 8, LANCE_GPU_STAGE_THREADS to set.  Parts smaller than FILL_PART_MIN are not split.
FILL_THREADS = max(1, int(os.environ.get("LANCE_GPU_STAGE_THREADS", 0)) or min(8, (os.cpu_count() or 1)))
FILL_PART_MIN = 4 << 20
_fill_pool: list[ThreadPoolExecutor] = []

_pinned_lock = threading.Lock()
_pinned: list[np.ndarray] = []
_streams: list[tuple[Any, Any]] = []  # (numba stream, CuPy owner or None)


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


@dataclass(slots=True)
class _Item:
    pos: int  # position in the arena
    size: int  # bytes
    source: np.ndarray | None  # uint8 host bytes (a view of the mapped file, or a blob)
    store: ObjectStore | None = None  # else: read [offset, offset + size) of key at fill time
    key: str = ""
    offset: int = 0
    #: called as ``land(view)`` once all the range's bytes are in pinned memory (``view``: a
    #: view of the slab, or a host copy when the range spans slabs), before the slab holding
    #: its last byte goes to the device; may raise to refuse them
    land: Callable[[np.ndarray], None] | None = None
    #: a range of a mapped file (``source`` a view of ``whole`` from ``file_offset``), which
    #: a neighbouring buffer of the same file may extend (:meth:`Stager.add_buffer`)
    path: str = ""
    whole: np.ndarray | None = None
    file_offset: int = 0


class Stager:
    """Collects byte ranges and blobs, assigns arena positions, uploads them in one pass."""

    def __init__(self) -> None:
        self.items: list[_Item] = []
        self.size = 0
        self._ranges: dict[tuple[str, int, int], int] = {}
        self._partial: dict[int, np.ndarray] = {}  # item index -> bytes of a range spanning slabs
        #: events recorded on the copy streams after the last upload's copies (:meth:`wait_ready`)
        self.ready: list[Any] = []

    def add_bytes(self, data: np.ndarray) -> int:
        """Stage host bytes (a page buffer view or a blob of any dtype); returns the position."""
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        pos = self.size
        self.items.append(_Item(pos, raw.size, raw))
        self.size = _align(pos + raw.size)
        return pos

    def add_range(
        self, store: ObjectStore, key: str, offset: int, size: int, *, land: Callable[[np.ndarray], None] | None = None
    ) -> int:
        """Stage ``size`` bytes at ``offset`` of object ``key`` of ``store``, read only when
        the slabs are filled (straight into them); registered once however often asked for
        (a range with ``land`` is always registered anew).  ``land(view)`` is called once
        with all the range's bytes (a view of the pinned slab; a host copy only where the
        range spans two slabs) before they go to the device, and may raise to refuse them."""
        if land is not None and not size:
            raise ValueError("a range with a land callback needs bytes (no bytes never land)")
        rkey = (store.uri(key), int(offset), int(size))
        pos = None if land is not None else self._ranges.get(rkey)
        if pos is None:
            pos = self.size
            self.items.append(_Item(pos, int(size), None, store, key, int(offset), land))
            self.size = _align(pos + int(size))
            self._ranges[rkey] = pos
        return pos

    def add_buffer(self, path: str, offset: int, view: np.ndarray, whole: np.ndarray | None = None) -> int:
        """Stage one page buffer of a file (registered once however often it is asked for);
        ``whole``: the file's memory map (``view`` is ``whole[offset:offset + view.size]``),
        so that a neighbour of the last staged range of the file joins it (module docstring)."""
        key = (path, int(offset), int(view.size))
        pos = self._ranges.get(key)
        if pos is None:
            if whole is not None and view.size:
                pos = self._join(path, whole, int(offset), int(view.size))
            if pos is None:
                pos = self.add_bytes(view)
                if whole is not None and view.size:
                    it = self.items[-1]
                    it.path, it.whole, it.file_offset = path, whole, int(offset)
            self._ranges[key] = pos
        return pos

    def _join(self, path: str, whole: np.ndarray, offset: int, size: int) -> int | None:
        """Extend the last item with bytes ``[offset, offset + size)`` of the mapped file
        ``path`` where it is a range of that file ending at most :data:`STAGE_GAP` bytes
        before ``offset``, at the same offset modulo :data:`ALIGN`; the buffer's position, or
        None."""
        if not self.items:
            return None
        it = self.items[-1]
        end = it.file_offset + it.size
        if it.whole is None or it.path != path or not (end <= offset <= end + STAGE_GAP) or (offset - it.file_offset) % ALIGN:
            return None
        if offset + size > it.whole.size:
            return None
        it.size = offset + size - it.file_offset
        it.source = it.whole[it.file_offset : it.file_offset + it.size]
        self.size = _align(it.pos + it.size)
        return it.pos + offset - it.file_offset

    def add_file_buffers(self, path: str, whole: np.ndarray, offsets: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """:meth:`add_buffer` of many buffers of the mapped file ``path`` (``whole``: its map)
        at once, in order: the same positions and items, found with array operations (no
        Python per buffer but the registration of each range).  A buffer of no bytes gets
        position 0 and no item."""
        offsets = np.asarray(offsets, np.int64)
        sizes = np.asarray(sizes, np.int64)
        out = np.zeros(offsets.size, np.int64)
        keys = list(zip([path] * offsets.size, offsets.tolist(), sizes.tolist(), strict=True))
        held = sizes > 0
        if not self._ranges.keys().isdisjoint(keys) or int((offsets + sizes).max(initial=0)) > whole.size:
            for i in np.flatnonzero(held).tolist():  # asked before: as one by one
                out[i] = self.add_buffer(path, int(offsets[i]), whole[offsets[i] : offsets[i] + sizes[i]], whole)
            return out
        idx = np.flatnonzero(held)
        if not idx.size:
            return out
        off, size = offsets[idx], sizes[idx]
        end = off + size
        # buffer k joins buffer k - 1's item: it starts at most STAGE_GAP after its end, in
        # step modulo ALIGN (so with the item's first buffer)
        join = np.zeros(idx.size, np.bool_)
        join[1:] = (off[1:] >= end[:-1]) & (off[1:] - end[:-1] <= STAGE_GAP) & ((off[1:] - off[:-1]) % ALIGN == 0)
        first_pos = self._join(path, whole, int(off[0]), int(size[0]))
        joined_first = first_pos is not None
        run = np.cumsum(~join) - 1  # item of each buffer (within this call)
        starts = np.flatnonzero(~join)
        lasts = np.append(starts[1:] - 1, idx.size - 1)
        if joined_first:  # the first run extends the stager's last item
            it = self.items[-1]
            it.size = int(end[lasts[0]]) - it.file_offset
            it.source = whole[it.file_offset : it.file_offset + it.size]
            self.size = _align(it.pos + it.size)
            run_pos = [it.pos]
            run_file = [it.file_offset]
            rest = range(1, starts.size)
        else:
            run_pos, run_file, rest = [], [], range(starts.size)
        for r in rest:
            lo, hi = int(off[starts[r]]), int(end[lasts[r]])
            pos = self.size
            self.items.append(_Item(pos, hi - lo, whole[lo:hi], path=path, whole=whole, file_offset=lo))
            self.size = _align(pos + hi - lo)
            run_pos.append(pos)
            run_file.append(lo)
        pos = np.asarray(run_pos, np.int64)[run] + off - np.asarray(run_file, np.int64)[run]
        out[idx] = pos
        self._ranges.update(zip(zip([path] * idx.size, off.tolist(), size.tolist(), strict=True), pos.tolist(), strict=True))
        return out

    @property
    def nbytes(self) -> int:
        return self.size

    def _fill_part(self, slab: np.ndarray, base: int, lo: int, hi: int, k: int) -> None:
        """Copy the arena bytes ``[lo, hi)`` into ``slab`` (which holds the arena from
        ``base``); ``k`` is an item index at or before the first item reaching ``lo``."""
        items = self.items
        while k < len(items) and items[k].pos + items[k].size <= lo:
            k += 1
        # deferred ranges in this window, per object: (ranges, slab offsets)
        reads: dict[tuple[int, str], tuple[ObjectStore, list[tuple[int, int]], list[int]]] = {}
        while k < len(items) and items[k].pos < hi:
            it = items[k]
            a = max(it.pos, lo)
            b = min(it.pos + it.size, hi)
            if b > a:
                if it.source is not None:
                    slab[a - base : b - base] = it.source[a - it.pos : b - it.pos]
                else:
                    assert it.store is not None
                    _store, ranges, offsets = reads.setdefault((id(it.store), it.key), (it.store, [], []))
                    ranges.append((it.offset + a - it.pos, b - a))
                    offsets.append(a - base)
            k += 1
        for (_sid, key), (store, ranges, offsets) in reads.items():
            read_ranges_into(store, key, ranges, slab, offsets)

    def _fill(self, slab: np.ndarray, lo: int, hi: int, k: int) -> None:
        """Fill ``slab`` with the arena bytes ``[lo, hi)``, in up to FILL_THREADS parts."""
        parts = min(FILL_THREADS, max(1, (hi - lo) // FILL_PART_MIN))
        if parts == 1:
            self._fill_part(slab, lo, lo, hi, k)
            return
        step = _align(-(-(hi - lo) // parts))
        bounds = [(p, min(p + step, hi)) for p in range(lo, hi, step)]
        list(_fill_executor().map(lambda ab: self._fill_part(slab, lo, ab[0], ab[1], k), bounds))

    def _land(self, slab: np.ndarray, lo: int, hi: int, k: int) -> None:
        """Call the ``land`` callbacks of the ranges in the arena window ``[lo, hi)`` held
        by ``slab``: at once for a range wholly inside it, else once its last part is in."""
        items = self.items
        while k < len(items) and items[k].pos < hi:
            it = items[k]
            a = max(it.pos, lo)
            b = min(it.pos + it.size, hi)
            if it.land is not None and b > a:
                if a == it.pos and b == it.pos + it.size:
                    it.land(slab[a - lo : b - lo])
                else:
                    part = self._partial.get(k)
                    if part is None:
                        part = self._partial[k] = np.empty(it.size, np.uint8)
                    part[a - it.pos : b - it.pos] = slab[a - lo : b - lo]
                    if b == it.pos + it.size:
                        del self._partial[k]
                        it.land(part)
            k += 1

    def host_bytes(self) -> np.ndarray:
        """The arena's bytes in host memory (what :meth:`upload` copies to the device; for
        host-side tests and references)."""
        out = np.zeros(max(_align(self.size), ALIGN), np.uint8)
        if self.items:
            self._fill_part(out, 0, 0, self.size, 0)
        return out

    def upload(self) -> object:
        """Copy everything to a new device arena (uint8) and return it."""
        total = max(_align(self.size), ALIGN)
        with _pinned_lock:  # the pinned slabs and streams are shared by every read of the process
            pairs = _get_streams(2)
            with _array.current_stream(pairs[0][1]):
                arena: Any = _array.empty(total, np.uint8)
            if not self.items:
                return arena
            streams = [st for st, _owner in pairs]
            slabs = _get_pinned(2, min(SLAB_BYTES, total))
            slab_bytes = slabs[0].size
            which = 0
            lo = 0
            k = 0  # first item not wholly below ``lo``
            while lo < self.size:
                hi = min(lo + slab_bytes, self.size)
                slab = slabs[which]
                streams[which].synchronize()  # this slab's previous copy is done
                while k < len(self.items) and self.items[k].pos + self.items[k].size <= lo:
                    k += 1
                self._fill(slab, lo, hi, k)
                self._land(slab, lo, hi, k)
                arena[lo:hi].copy_to_device(slab[: hi - lo], stream=streams[which])
                which ^= 1
                lo = hi
            # the arena is ready once both copy streams reach here: decoding waits for these
            # events on its own stream (wait_ready), the host does not (a later upload waits
            # for a slab's copy before refilling it, above)
            cuda = _array.cuda()
            self.ready = []
            for st in streams:
                event = cuda.event() if is_simulator() else cuda.event(timing=False)
                event.record(stream=st)
                self.ready.append(event)
        return arena

    def wait_ready(self, stream: Any = 0) -> None:
        """Make ``stream`` (default: the legacy stream the kernels run on) wait until the
        last :meth:`upload`'s copies are done (events, no host synchronisation)."""
        for event in self.ready:
            event.wait(stream=stream)
        self.ready = []


def _fill_executor() -> ThreadPoolExecutor:
    """The threads that fill slabs, kept for later reads (the caller holds ``_pinned_lock``)."""
    if not _fill_pool:
        _fill_pool.append(ThreadPoolExecutor(FILL_THREADS, thread_name_prefix="lance-gpu-stage"))
    return _fill_pool[0]


def _get_streams(count: int) -> list[tuple[Any, Any]]:
    """``count`` copy streams, kept for later reads (the caller holds ``_pinned_lock``):
    non-blocking CuPy streams seen by numba as external streams, else numba streams."""
    if len(_streams) < count:
        cp = _array.cupy()
        cuda = _array.cuda()
        while len(_streams) < count:
            if cp is not None:
                owner = cp.cuda.Stream(non_blocking=True)
                _streams.append((cuda.external_stream(owner.ptr), owner))
            else:
                _streams.append((cuda.stream(), None))
    return _streams[:count]


def _get_pinned(count: int, nbytes: int) -> list[np.ndarray]:
    """``count`` pinned host buffers of at least ``nbytes``, kept for later reads (the caller
    holds ``_pinned_lock``)."""
    if len(_pinned) < count or _pinned[0].size < nbytes:
        cuda = _array.cuda()
        for stream, _owner in _streams:  # the last upload's copies may still read the old slabs
            stream.synchronize()
        _pinned.clear()
        for _ in range(count):
            _pinned.append(cuda.pinned_array(max(nbytes, ALIGN), dtype=np.uint8))
    return _pinned[:count]
