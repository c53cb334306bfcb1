# SPDX-License-Identifier: Apache-2.0
"""The storage protocol every layer reads and writes dataset bytes through.

An :class:`ObjectStore` addresses objects by *key*: a ``/``-separated string.  For the
local store a key is an absolute file-system path (``/data/ds.lance/_versions/x``); for an
object store it is the object's key inside its bucket (``prefix/ds.lance/_versions/x``).
A dataset is a pair ``(store, root)`` where ``root`` is the key prefix of the dataset
directory; :func:`join` builds the keys beneath it.  :meth:`ObjectStore.uri` turns a key
back into the URI a user would recognise (``s3://bucket/prefix/...``), and every error
names that URI.

Reads return NumPy ``uint8`` arrays (zero-copy views of a memory map for local files);
writes take ``bytes``-like objects.  Objects are immutable once written, except that
:meth:`ObjectStore.put` may replace one: commits only ever use
:meth:`ObjectStore.put_if_absent`.
"""

from __future__ import annotations

import datetime as _dt
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from lance_gpu.errors import CorruptFileError

__all__ = [
    "COALESCE_GAP",
    "BufferedWriter",
    "ObjectMeta",
    "ObjectStore",
    "ReadHandle",
    "StoreFile",
    "StoreStats",
    "WriteHandle",
    "coalesce",
    "join",
    "open_with_tail",
    "read_ranges_into",
    "remove_quietly",
]

#: Ranges closer than this are read as one block (the gap is read and dropped): the
#: default, and local files'.  Stores may set their own ``coalesce_gap`` (object stores:
#: :data:`~lance_gpu.io.remote.REMOTE_COALESCE_GAP`, where a request costs more than
#: transferring a megabyte).
COALESCE_GAP = 64 * 1024


def join(root: str, *parts: str) -> str:
    """The key of ``parts`` beneath ``root`` (``root`` may be ``""``: the store's top): the
    non-empty parts stripped of their slashes, after ``root`` without its trailing ones (a
    root of only slashes, the file system's top, keeps one)."""
    tail = [p.strip("/") for p in parts if p]
    if not root:
        return "/".join(tail)
    head = root.rstrip("/")
    if tail:
        tail.insert(0, head)
        return "/".join(tail)
    return head or "/"


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    """One object: its key, size in bytes and the time it was last written.

    ``last_modified`` is a timezone-aware UTC datetime (local files: the ``st_mtime``;
    object stores: the ``Last-Modified`` the service reports), or ``None`` where a store
    cannot tell (some fsspec file systems).  Cleanup uses it for pylance's age rules.
    """

    path: str
    size: int
    last_modified: _dt.datetime | None = None


#: read requests and bytes read by every store of this process (pylance's ``iops_counter`` /
#: ``bytes_read_counter``), under :data:`_PROCESS_LOCK`
_PROCESS_READS = {"requests": 0, "bytes": 0}
_PROCESS_LOCK = threading.Lock()


def process_read_counters() -> tuple[int, int]:
    """(read requests, bytes read) by every store of this process since it started."""
    with _PROCESS_LOCK:
        return _PROCESS_READS["requests"], _PROCESS_READS["bytes"]


@dataclass
class StoreStats:
    """Request and byte counters of one store (thread-safe).

    ``requests`` counts every request issued (a coalesced group of ranges is one request);
    ``gets`` / ``puts`` / ``heads`` / ``lists`` / ``deletes`` split it by kind.
    """

    requests: int = 0
    gets: int = 0
    puts: int = 0
    heads: int = 0
    lists: int = 0
    deletes: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, kind: str, n: int = 1, nbytes: int = 0) -> None:
        """Count ``n`` requests of ``kind`` (a counter's name: ``"gets"``, ``"puts"``, ...)
        moving ``nbytes`` in all."""
        if kind == "gets":
            self.add_gets(n, nbytes)
            return
        with self._lock:
            self.requests += n
            setattr(self, kind, getattr(self, kind) + n)
            if kind == "puts":
                self.bytes_written += nbytes

    def add_gets(self, n: int, nbytes: int) -> None:
        """``n`` reads of ``nbytes`` in all, counted here and in the process-wide read
        counters (the hot path of mapped reads: no counter looked up by name)."""
        with self._lock:
            self.requests += n
            self.gets += n
            self.bytes_read += nbytes
        with _PROCESS_LOCK:
            _PROCESS_READS["requests"] += n
            _PROCESS_READS["bytes"] += nbytes

    def snapshot(self) -> dict[str, int]:
        """The counters as a plain dict."""
        with self._lock:
            return {
                k: getattr(self, k)
                for k in ("requests", "gets", "puts", "heads", "lists", "deletes", "bytes_read", "bytes_written")
            }

    def reset(self) -> None:
        with self._lock:
            for k in ("requests", "gets", "puts", "heads", "lists", "deletes", "bytes_read", "bytes_written"):
                setattr(self, k, 0)


@runtime_checkable
class ReadHandle(Protocol):
    """Random access to one immutable object, opened once and read many times.

    A handle may also have ``identity``: a hashable value naming the object's exact state
    (equal identities, equal bytes), or None / absent where the store cannot tell; caches
    of what is parsed from an object (file metadata) are keyed by it.
    """

    path: str
    size: int

    def read(self, offset: int, size: int) -> np.ndarray: ...

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[np.ndarray]: ...

    def release(self, ranges: Sequence[tuple[int, int]], keep: Sequence[tuple[int, int]] = ()) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class WriteHandle(Protocol):
    """A new object written in pieces; it appears (atomically) only on :meth:`close`."""

    path: str

    def write(self, data: bytes | memoryview) -> int: ...

    def tell(self) -> int: ...

    def close(self, sync: bool = True) -> None:
        """Publish the object.  ``sync=False`` (local files) skips making its bytes durable
        first: the caller must :meth:`ObjectStore.sync` it before anything durable (a
        manifest) names it.  Stores whose writes are durable once visible ignore it."""
        ...

    def abort(self) -> None: ...


@runtime_checkable
class ObjectStore(Protocol):
    """What lance-gpu needs of a storage back end.  Every failure raises a
    :class:`~lance_gpu.errors.StorageError` subclass naming the object's URI."""

    stats: StoreStats
    #: True when :meth:`put_if_absent` is atomic (commits are refused otherwise).
    supports_conditional_put: bool
    #: False for read-only stores (``http(s)://``).
    writable: bool

    def uri(self, path: str) -> str:
        """The user-facing URI of key ``path``."""
        ...

    def head(self, path: str) -> ObjectMeta:
        """Size and ``last_modified`` of one object (:class:`ObjectNotFoundError` if absent)."""
        ...

    def size(self, path: str) -> int: ...

    def exists(self, path: str) -> bool: ...

    def read_range(self, path: str, offset: int, length: int) -> np.ndarray: ...

    def read_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[np.ndarray]:
        """Many ``(offset, length)`` ranges of one object, coalesced, fetched concurrently."""
        ...

    def read_ranges_into(
        self, path: str, ranges: Sequence[tuple[int, int]], out: np.ndarray | memoryview, offsets: Sequence[int]
    ) -> None:
        """Read each ``(offset, length)`` range of ``path`` into the caller's writable buffer
        ``out`` (a pinned staging slab), range ``i`` at byte ``offsets[i]``; requests as
        :meth:`read_ranges`.  This default reads the ranges and copies them."""
        copy_into(self.read_ranges(path, ranges), out, offsets)

    def read_tail(self, path: str, length: int) -> tuple[np.ndarray, int]:
        """The last ``min(length, size)`` bytes of an object and its size, in one request."""
        ...

    def get(self, path: str) -> bytes: ...

    def put(self, path: str, data: bytes | memoryview) -> None:
        """Write a whole object (replacing one that exists); atomic: readers see all or nothing."""
        ...

    def put_if_absent(self, path: str, data: bytes | memoryview) -> None:
        """Create ``path`` only if nothing is there; :class:`ObjectExistsError` otherwise."""
        ...

    def delete(self, path: str) -> None:
        """Remove an object; a missing one is not an error."""
        ...

    def list(self, prefix: str) -> list[ObjectMeta]:
        """Every object whose key lies beneath ``prefix/`` (recursively), with its size and
        ``last_modified``; staging files of unfinished writes are not listed."""
        ...

    def open(self, path: str) -> ReadHandle: ...

    def open_writer(self, path: str) -> WriteHandle: ...

    def sync(self, paths: Sequence[str]) -> None:
        """Make the published objects ``paths`` durable (local files: fsync; a no-op where
        a visible object is already durable).  A commit calls it on every file its
        manifest adds before publishing the manifest."""
        ...


def remove_quietly(store: ObjectStore, keys: Iterable[str]) -> None:
    """Delete objects that were written but cannot have been committed (best effort: a
    failure leaves an unreferenced object, which ``cleanup_old_versions`` removes)."""
    for key in keys:
        try:
            store.delete(key)
        except OSError:
            pass


def byte_view(out: np.ndarray | memoryview) -> np.ndarray:
    """``out`` (a C-contiguous array of any dtype, or a writable buffer) as flat uint8."""
    arr = out if isinstance(out, np.ndarray) else np.frombuffer(out, dtype=np.uint8)
    if not arr.flags.c_contiguous or not arr.flags.writeable:
        raise ValueError("the output buffer must be C-contiguous and writable")
    return arr.reshape(-1).view(np.uint8)


def copy_into(blocks: Sequence[np.ndarray | memoryview], out: np.ndarray | memoryview, offsets: Sequence[int]) -> None:
    """Copy ``blocks[i]`` to ``out[offsets[i]:]`` (refused if one would not fit)."""
    dst = byte_view(out)
    if len(blocks) != len(offsets):
        raise ValueError(f"{len(blocks)} ranges but {len(offsets)} output offsets")
    for block, at in zip(blocks, offsets, strict=True):
        src = block if isinstance(block, np.ndarray) else np.frombuffer(block, dtype=np.uint8)
        if at < 0 or at + src.size > dst.size:
            raise ValueError(f"{src.size} bytes at {at} do not fit an output buffer of {dst.size} bytes")
        dst[at : at + src.size] = src


def read_ranges_into(
    store: ObjectStore,
    path: str,
    ranges: Sequence[tuple[int, int]],
    out: np.ndarray | memoryview,
    offsets: Sequence[int],
) -> None:
    """:meth:`ObjectStore.read_ranges_into` on any store: stores without the method (a
    user's own) read the ranges and copy them."""
    into = getattr(store, "read_ranges_into", None)
    if into is not None:
        into(path, ranges, out, offsets)
    else:
        copy_into(store.read_ranges(path, ranges), out, offsets)


def coalesce(ranges: Sequence[tuple[int, int]], gap: int = COALESCE_GAP) -> list[tuple[int, int, list[int]]]:
    """Group ``(offset, size)`` ranges whose gaps are at most ``gap`` bytes.

    Returns ``(start, end, indices)`` per group, in offset order.
    """
    order = sorted(range(len(ranges)), key=lambda i: ranges[i][0])
    groups: list[tuple[int, int, list[int]]] = []
    for i in order:
        off, size = ranges[i]
        if groups and off - groups[-1][1] <= gap:
            start, end, idx = groups[-1]
            idx.append(i)
            groups[-1] = (start, max(end, off + size), idx)
        else:
            groups.append((off, off + size, [i]))
    return groups


def split_groups(
    ranges: Sequence[tuple[int, int]], groups: Iterable[tuple[int, int, list[int]]], blocks: Sequence[np.ndarray]
) -> list[np.ndarray]:
    """The views of each requested range inside the fetched coalesced ``blocks``."""
    out: list[np.ndarray | None] = [None] * len(ranges)
    for (start, _end, idx), block in zip(groups, blocks, strict=True):
        for i in idx:
            off, size = ranges[i]
            out[i] = block[off - start : off - start + size]
    return out  # type: ignore[return-value]


def check_ranges(uri: str, size: int, ranges: Sequence[tuple[int, int]]) -> None:
    """Refuse ranges outside an object of ``size`` bytes (a truncated file is corrupt)."""
    for off, n in ranges:
        if off < 0 or n < 0 or off + n > size:
            raise CorruptFileError(uri, f"byte range [{off}, {off + n}) lies outside the file of {size} bytes")


_EMPTY = np.zeros(0, np.uint8)


class StoreFile:
    """A :class:`ReadHandle` over any store: the size is fetched once (or given), reads go
    through :meth:`ObjectStore.read_ranges`.  Release is a no-op (nothing is mapped).

    Objects of at most ``whole_below`` bytes are fetched whole on the first read (one
    request instead of one per column; ``tail`` -- already fetched bytes at the end of the
    object -- is reused), larger ones range by range.
    """

    def __init__(
        self, store: ObjectStore, path: str, size: int | None = None, *, tail: np.ndarray | None = None, whole_below: int = 0
    ) -> None:
        self.store = store
        self.path = store.uri(path)
        self.key = path
        self.size = store.size(path) if size is None else size
        self._whole: np.ndarray | None = tail if tail is not None and tail.size == self.size else None
        self._tail = tail
        self._fetch_whole = self.size <= whole_below
        #: Gap up to which ranges are fetched as one request (the store's).
        self.coalesce_gap = int(getattr(store, "coalesce_gap", COALESCE_GAP))
        self._lock = threading.Lock()
        self._prefetched: list[tuple[int, int, np.ndarray]] = []  # (start, end, bytes), sorted

    def _object(self) -> np.ndarray | None:
        if self._whole is None and self._fetch_whole:
            with self._lock:
                if self._whole is None:
                    tail = self._tail if self._tail is not None else np.zeros(0, np.uint8)
                    head = self.store.read_range(self.key, 0, self.size - tail.size) if self.size > tail.size else tail[:0]
                    self._whole = np.concatenate([head, tail]) if tail.size else head
        return self._whole

    def read(self, offset: int, size: int) -> np.ndarray:
        check_ranges(self.path, self.size, [(offset, size)])
        if size == 0:
            return np.zeros(0, np.uint8)
        whole = self._object()
        if whole is not None:
            return whole[offset : offset + size]
        with self._lock:
            hit = self._cached(offset, size)
        if hit is not None:
            return hit
        return self.store.read_range(self.key, offset, size)

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[np.ndarray]:
        check_ranges(self.path, self.size, ranges)
        whole = self._object()
        if whole is not None:
            return [whole[o : o + n] for o, n in ranges]
        with self._lock:
            hits = [self._cached(int(o), int(n)) for o, n in ranges]
        if all(h is not None for h in hits):
            return hits  # type: ignore[return-value]
        return self.store.read_ranges(self.key, ranges)

    def prefetch(self, ranges: Sequence[tuple[int, int]]) -> None:
        """Fetch ``ranges`` now (coalesced, concurrently) so that later reads of exactly
        these ranges need no request: the scan calls this for the next fragment while it
        decodes the current one."""
        if self._whole is not None or self._fetch_whole:
            self._object()
            return
        wanted = [(int(o), int(n)) for o, n in ranges if n > 0 and self._in_tail(int(o), int(n)) is None]
        if not wanted:
            return
        check_ranges(self.path, self.size, wanted)
        groups = coalesce(wanted, self.coalesce_gap)
        got = self.store.read_ranges(self.key, [(start, end - start) for start, end, _ in groups])
        with self._lock:
            self._prefetched.extend((start, end, block) for (start, end, _), block in zip(groups, got, strict=True))
            self._prefetched.sort(key=lambda blk: blk[0])

    def needs_request(self, offset: int, size: int) -> bool:
        """True when reading ``[offset, offset + size)`` would issue a request: the bytes
        are not held yet (not a whole small object, not the tail read at open, not a
        prefetched block).  The GPU path then reads them straight into its staging slabs."""
        if self._whole is not None or self._fetch_whole or size == 0:
            return False
        with self._lock:
            return self._cached(offset, size) is None

    def _in_tail(self, offset: int, size: int) -> np.ndarray | None:
        """The bytes of ``[offset, offset + size)`` if the tail read at open holds them."""
        tail = self._tail
        if tail is None:
            return None
        start = self.size - tail.size
        if offset >= start:
            return tail[offset - start : offset - start + size]
        return None

    def _cached(self, offset: int, size: int) -> np.ndarray | None:
        """The held bytes of ``[offset, offset + size)`` -- from the tail read at open and
        the prefetched blocks (which may overlap) -- or None if some byte is not held.  A
        view when one block holds the range, else the pieces joined."""
        if size == 0:
            return _EMPTY
        hit = self._in_tail(offset, size)
        if hit is not None:
            return hit
        segments = self._prefetched
        if self._tail is not None and self._tail.size:
            segments = [*segments, (self.size - self._tail.size, self.size, self._tail)]
        pieces: list[np.ndarray] = []
        pos, stop = offset, offset + size
        while pos < stop:
            # the held segment starting at or before ``pos`` that reaches furthest
            best = max((seg for seg in segments if seg[0] <= pos < seg[1]), key=lambda seg: seg[1], default=None)
            if best is None:
                return None
            start, end, block = best
            take = min(end, stop)
            if pos == offset and take == stop:
                return block[pos - start : stop - start]
            pieces.append(block[pos - start : take - start])
            pos = take
        return np.concatenate(pieces)

    def drop_prefetched(self) -> None:
        """Forget prefetched bytes (the scan is done with this file)."""
        with self._lock:
            self._prefetched = []

    def release(self, ranges: Sequence[tuple[int, int]], keep: Sequence[tuple[int, int]] = ()) -> None:
        return None

    def close(self) -> None:
        self._whole = None
        self._tail = None


class BufferedWriter:
    """A :class:`WriteHandle` for stores whose objects are written whole: the pieces are
    gathered in memory and put on :meth:`close` (an aborted writer leaves nothing)."""

    def __init__(self, store: ObjectStore, path: str) -> None:
        self.store = store
        self.path = path
        self._parts: list[bytes] = []
        self._size = 0
        self._done = False

    def write(self, data: bytes | memoryview) -> int:
        b = bytes(data)
        self._parts.append(b)
        self._size += len(b)
        return len(b)

    def tell(self) -> int:
        return self._size

    def close(self, sync: bool = True) -> None:
        if self._done:
            return
        self._done = True
        data = b"".join(self._parts)
        self._parts = []
        self.store.put(self.path, data)

    def abort(self) -> None:
        self._done = True
        self._parts = []


def open_with_tail(store: ObjectStore, path: str, tail: int) -> tuple[ReadHandle, np.ndarray]:
    """Open ``path`` and read its last ``tail`` bytes: one request on object stores (a
    suffix-range GET also reports the size), a mapped file locally."""
    if getattr(store, "maps_files", False):
        handle = store.open(path)
        n = min(tail, handle.size)
        return handle, handle.read(handle.size - n, n)
    data, size = store.read_tail(path, tail)
    return StoreFile(store, path, size, tail=data, whole_below=getattr(store, "whole_object_below", 0)), data
