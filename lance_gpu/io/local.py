# SPDX-License-Identifier: Apache-2.0
"""The local file system as an :class:`~lance_gpu.io.store.ObjectStore`.

Keys are absolute POSIX paths.  Reads are zero-copy views of a read-only memory map (a
``pread`` fallback where mapping fails); a decoded range's pages may be released from this
process (``madvise(MADV_DONTNEED)``) when the store's ``release_pages`` says so -- always
safe, the page cache keeps the file.  Writes go to a staging file ``.tmp_{name}_{128 random bits in hex}``
next to the target, fsync'd, then published: :meth:`LocalStore.put` renames it over the
target, :meth:`LocalStore.put_if_absent` hard-links it (``link`` fails if the target
exists, so a committed object is never replaced) or, where links are not supported,
creates the target with ``O_EXCL``.  The staging file is removed on every path, failures
included.  A streamed data file may be published unsynced (``LocalWriter.close(sync=False)``)
and fsync'd later by :meth:`LocalStore.sync`, which a commit runs on every file its manifest
adds before publishing the manifest.
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import datetime as _dt
import errno
import fcntl
import functools
import gc
import mmap
import os
import re
import stat
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any, BinaryIO

import numpy as np

from lance_gpu.errors import CorruptFileError
from lance_gpu.io._errors import translate
from lance_gpu.io.background import in_background, waiting_in_background
from lance_gpu.io.store import (
    ObjectMeta,
    StoreStats,
    check_ranges,
    coalesce,
    copy_into,
    split_groups,
)

__all__ = ["LOCAL", "STAGING_NAME", "STAGING_PREFIX", "LocalFile", "LocalStore", "LocalWriter"]

#: Name prefix of staging files (never listed, never parsed as versions).
STAGING_PREFIX = ".tmp_"
#: A staging file's whole name: ``.tmp_{target name}_{32 hex digits}`` (see :func:`_staging`).
STAGING_NAME = re.compile(r"\.tmp_.+_[0-9a-f]{32}")
#: Largest file :meth:`LocalStore.overwrite_in_place` rewrites (one page: a single write).
IN_PLACE_LIMIT = 4096
#: Most ``iovec`` entries one ``preadv`` call takes (Linux's ``IOV_MAX``).
IOV_MAX = 1024
#: Buffer of a file being written, in bytes (``io.DEFAULT_BUFFER_SIZE``; ``open``'s default,
#: the file system's block size, is 4 KiB on ext4: pieces past the buffer go straight out).
WRITE_BUFFER = 8192


@functools.cache
def _libc_preadv() -> Any:
    """libc's ``preadv(fd, iov, iovcnt, offset)`` through ctypes (which releases the GIL
    during the call), or None where there is none (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.preadv
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int64]
    fn.restype = ctypes.c_ssize_t
    return fn



def _mtime(st: os.stat_result) -> _dt.datetime:
    """A file's modification time as a UTC datetime (what object stores call ``last_modified``)."""
    return _dt.datetime.fromtimestamp(st.st_mtime, _dt.UTC)


def _staging(path: str) -> str:
    """``path``'s staging name (:data:`STAGING_NAME`): 128 random bits in hex, as a uuid4's
    ``hex`` spells them, without building the UUID object."""
    head, sep, tail = path.rpartition("/")
    return f"{head}{sep}{STAGING_PREFIX}{tail}_{os.urandom(16).hex()}"


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


#: Open :class:`LocalFile` objects of the process, and the count at which the next one
#: opened first runs the cycle collector.  Readers left in reference cycles by callers
#: (a snapshot's own caches hold none: they die by reference counting) close, and give
#: their descriptors back, only when the collector runs; a process opening many files
#: would otherwise run out of descriptors (or past 1,024, where ``select()`` fails, as
#: in Spark's accumulator server) first.  After a collection the next one is due
#: ``max(512, still open / 2)`` opens later: at most 512 descriptors beyond those really
#: in use for small processes, and amortised constant time for files really in use.
_open_files = 0
_collect_at = 512
#: Open :class:`LocalFile` handles, with or without a descriptor (tests: readers close).
_open_handles = 0
#: Files up to this size are read whole when opened (``pread``) instead of mapped.
WHOLE_READ_BYTES = 64 * 1024
_open_files_lock = threading.Lock()


def _file_opened() -> None:
    global _open_files, _collect_at
    with _open_files_lock:
        _open_files += 1
        due = _open_files >= _collect_at
    if due:
        gc.collect()
        with _open_files_lock:
            _collect_at = _open_files + max(512, _open_files // 2)


def _handle_opened() -> None:
    global _open_handles
    with _open_files_lock:
        _open_handles += 1


def _handle_closed() -> None:
    global _open_handles
    with _open_files_lock:
        _open_handles -= 1


def _file_closed() -> None:
    global _open_files
    with _open_files_lock:
        _open_files -= 1


def file_identity(path: str, st: os.stat_result) -> tuple[object, ...]:
    """A local file's state, as :attr:`LocalFile.identity` names it: any write, truncation,
    rename over it or replacement changes the inode, size or change time."""
    return (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class LocalFile:
    """Positional reads of one local file: a read-only memory map, ``pread`` otherwise."""

    __slots__ = ("_counted", "_fd", "_map", "_mm", "_release", "_stats", "identity", "path", "size")

    def __init__(self, path: str, stats: StoreStats, release_pages: bool) -> None:
        self.path = path
        self._stats = stats
        self._release = release_pages
        self._fd = -1
        self._counted = False
        self._map: np.ndarray | None = None
        self._mm: mmap.mmap | None = None
        try:
            self._fd = os.open(path, os.O_RDONLY)
            st = os.fstat(self._fd)
        except OSError as exc:
            raise translate(exc, path, "open") from exc
        self.size = st.st_size
        #: The file's state: any write, truncation, rename over it or replacement changes the
        #: inode, size or change time (``st_ctime_ns`` cannot be set back from user space).
        self.identity = file_identity(path, st)
        stats.add("heads")
        if 0 < self.size <= WHOLE_READ_BYTES:
            # A small file is read whole at once and its descriptor closed: no map to set up
            # and tear down, no descriptor held while the reader lives (a history of small
            # appends keeps thousands of readers), its bytes served as the map would be.
            try:
                data = os.pread(self._fd, self.size, 0)
            except OSError as exc:
                os.close(self._fd)
                self._fd = -1
                raise translate(exc, path, "read") from exc
            if len(data) == self.size:
                self._map = np.frombuffer(data, dtype=np.uint8)
                os.close(self._fd)
                self._fd = -1
                _handle_opened()
                return
        if self.size:
            try:
                self._mm = mmap.mmap(self._fd, self.size, prot=mmap.PROT_READ)
                self._map = np.frombuffer(self._mm, dtype=np.uint8)
            except (OSError, ValueError):
                self._map = None
            else:
                # the map holds a descriptor of its own; ours served only unmapped reads
                os.close(self._fd)
                self._fd = -1
        self._counted = True
        _file_opened()
        _handle_opened()

    def close(self) -> None:
        # The mapping lives as long as arrays reference it; only the descriptor closes.
        if self._map is not None or self._fd >= 0:
            _handle_closed()
        self._map = None
        self._mm = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._counted:
            self._counted = False
            _file_closed()

    def __del__(self) -> None:  # pragma: no cover - best effort
        with contextlib.suppress(OSError):
            self.close()

    def read(self, offset: int, size: int) -> np.ndarray:
        """``size`` bytes at ``offset`` (a zero-copy view when mapped)."""
        if offset < 0 or size < 0 or offset + size > self.size:
            check_ranges(self.path, self.size, [(offset, size)])  # raises
        self._stats.add_gets(1, size)
        if self._map is not None:
            return self._map[offset : offset + size]
        out = np.empty(size, dtype=np.uint8)
        view = memoryview(out)  # type: ignore[arg-type]
        done = 0
        while done < size:
            try:
                n = os.preadv(self._fd, [view[done:]], offset + done)
            except OSError as exc:
                raise translate(exc, self.path, "read") from exc
            if n <= 0:
                raise CorruptFileError(self.path, f"short read at offset {offset + done}")
            done += n
        return out

    @property
    def mapped(self) -> np.ndarray | None:
        """The whole file as a read-only zero-copy ``uint8`` view of its map (None when not
        mapped).  For callers gathering thousands of tiny ranges at once; they count their
        reads with :meth:`count_reads`."""
        return self._map

    def count_reads(self, requests: int, nbytes: int) -> None:
        """Record reads done through :attr:`mapped` in the store's counters."""
        self._stats.add_gets(requests, nbytes)

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[np.ndarray]:
        """Many ranges; near neighbours are read as one block, returned as views of it."""
        if not ranges:
            return []
        check_ranges(self.path, self.size, ranges)
        groups = coalesce(ranges)
        mapped = self._map
        if mapped is None:
            blocks = [self.read(start, end - start) for start, end, _ in groups]
        else:
            # Views of the map: one counter update for all groups (a take reads thousands).
            self._stats.add_gets(len(groups), sum(end - start for start, end, _ in groups))
            blocks = [mapped[start:end] for start, end, _ in groups]
        return split_groups(ranges, groups, blocks)

    def read_scattered(self, offset: int, targets: np.ndarray) -> bool:
        """Read the file's bytes from ``offset`` on, back to back, into the memory ranges
        ``targets`` (``k x 2`` uint64: address, length; one ``preadv`` per
        :data:`IOV_MAX` of them): the kernel copies page-cache bytes straight into their
        final places, with no mapping set up and torn down.  The caller owns every target
        range and keeps it alive during the call.

        Returns False, having read nothing reliable, where this cannot be done: no
        ``preadv`` here, the file at the path is no longer the one opened (another inode,
        size or change time), or a short read (a truncated file); callers then read the
        bytes the usual way, which reports what is wrong.
        """
        if self._mm is None and self._map is not None:
            return False  # read whole into memory already
        if self._mm is not None and not self._release:
            return False  # mapped pages stay: a later read of them costs nothing
        preadv = _libc_preadv()
        if preadv is None or targets.ndim != 2 or targets.shape[1] != 2 or targets.dtype != np.uint64:
            return False
        lengths = targets[:, 1]
        total = int(lengths.sum())
        if offset < 0 or offset + total > self.size:
            return False
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return False
        try:
            if file_identity(self.path, os.fstat(fd)) != self.identity:
                return False
            iov = np.ascontiguousarray(targets)
            at = offset
            for first in range(0, iov.shape[0], IOV_MAX):
                count = min(IOV_MAX, iov.shape[0] - first)
                want = int(lengths[first : first + count].sum())
                got = preadv(fd, iov[first:].ctypes.data, count, at)
                if got != want:
                    return False
                at += want
        finally:
            os.close(fd)
        self._stats.add_gets(1, total)
        return True

    def release(self, ranges: Sequence[tuple[int, int]], keep: Sequence[tuple[int, int]] = ()) -> None:
        """Drop the mapped pages of decoded ``ranges`` from this process (a hint).

        Address ranges in ``keep`` (``(address, size)`` of buffers still referenced
        zero-copy) are left alone.
        """
        if not self._release or self._mm is None or self._map is None or not hasattr(self._mm, "madvise"):
            return
        base = self._map.ctypes.data
        kept = [(a - base, a - base + n) for a, n in keep if base <= a < base + self.size]
        page = mmap.PAGESIZE
        for off, size in ranges:
            lo = -(-off // page) * page
            hi = ((off + size) // page) * page
            if hi <= lo or any(k0 < hi and k1 > lo for k0, k1 in kept):
                continue
            try:
                self._mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
            except (OSError, ValueError):
                return


class LocalWriter:
    """Streams a new local file into a staging file; :meth:`close` fsyncs and renames it
    to its name (``close(sync=False)`` renames it unsynced: :meth:`LocalStore.sync` it
    before a manifest names it), :meth:`abort` (or any failure) removes it.

    The staging file is created in the background where a core is spare
    (:func:`~lance_gpu.io.background.in_background`): creating a file is a journal
    operation of the file system (0.1-0.5 ms of kernel time on ext4 in this VM), which then
    overlaps the caller's encoding of what it writes first.  The first :meth:`write` (or
    :meth:`close`) waits for it; a creation that failed raises there, translated, with
    nothing left behind."""

    def __init__(self, store: LocalStore, path: str) -> None:
        self.path = path
        self._store = store
        self._staging = _staging(path)
        self._size = 0
        self._handle: BinaryIO | None = None
        self._creating: Future[BinaryIO] | None = in_background(_create_staging, self._staging, path)

    @property
    def _fh(self) -> BinaryIO:
        """The staging file, once created (waits for its creation; raises its failure)."""
        if self._handle is None:
            creating, self._creating = self._creating, None
            if creating is None:
                raise ValueError(f"writer of {self.path} is closed")
            self._handle = creating.result()  # closed in close() or abort()
        return self._handle

    def write(self, data: bytes | memoryview) -> int:
        fh = self._handle
        if fh is None:
            fh = self._fh  # (the first write waits for the creation)
        try:
            n = fh.write(data)
        except OSError as exc:
            self.abort()
            raise translate(exc, self.path, "write") from exc
        self._size += n
        return n

    def tell(self) -> int:
        return self._size

    def close(self, sync: bool = True) -> None:
        if self._handle is None and self._creating is None:
            return  # aborted (or a failed creation already raised)
        fh = self._fh
        if fh.closed:
            return
        try:
            fh.flush()
            if sync:
                os.fsync(fh.fileno())
            fh.close()
            os.replace(self._staging, self.path)
        except OSError as exc:
            self.abort()
            raise translate(exc, self.path, "write") from exc
        self._store.stats.add("puts", 1, self._size)

    def fill(self, data: bytes | memoryview) -> str:
        """Write ``data`` as the whole staging file, close it without publishing it, and
        return its path (for :meth:`LocalStore.put_if_absent_after_sync`, which links it);
        on a failure it is removed."""
        self.write(data)  # (a failure removes it)
        try:
            self._fh.close()
        except OSError as exc:
            self.abort()
            raise translate(exc, self.path, "write") from exc
        return self._staging

    def abort(self) -> None:
        creating, self._creating = self._creating, None
        if creating is not None and creating.exception() is None:
            self._handle = creating.result()
        if self._handle is None:
            return  # never created
        try:
            self._handle.close()
        except OSError:
            pass
        _unlink_quietly(self._staging)


def _create_exclusive(staging: str, path: str) -> BinaryIO:
    """Create ``staging`` exclusively, in ``path``'s directory: tried first as it is (a
    commit's directories exist: no ``stat`` / ``mkdir`` / ``stat`` of them per file), the
    directories made only when it is missing.  Its buffer's size is given (:data:`WRITE_BUFFER`):
    ``open`` then skips asking whether the file is a terminal (an ``ioctl`` per file)."""
    try:
        return open(staging, "xb", buffering=WRITE_BUFFER)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        return open(staging, "xb", buffering=WRITE_BUFFER)


def _create_staging(staging: str, path: str) -> BinaryIO:
    """Create the staging file ``staging`` of ``path`` (and its directories), exclusively."""
    try:
        return _create_exclusive(staging, path)
    except OSError as exc:
        raise translate(exc, path, "write") from exc


class LocalStore:
    """The local file system; keys are absolute paths.

    Parameters
    ----------
    release_pages : bool, default True
        Whether :meth:`LocalFile.release` drops decoded pages of memory maps.
    """

    supports_conditional_put = True
    writable = True
    #: Reads are memory-mapped: open the file once and slice it.
    maps_files = True
    #: Keys are absolute file-system paths.
    absolute_keys = True

    def __init__(self, *, release_pages: bool = True) -> None:
        self.stats = StoreStats()
        self.release_pages = release_pages

    def __repr__(self) -> str:
        return "LocalStore()"

    def __reduce__(self) -> tuple:
        return (_make_local, (self.release_pages,))

    def uri(self, path: str) -> str:
        return path

    def head(self, path: str) -> ObjectMeta:
        self.stats.add("heads")
        try:
            st = os.stat(path)
        except OSError as exc:
            raise translate(exc, path, "head") from exc
        if not os.path.isfile(path):
            raise translate(FileNotFoundError(errno.ENOENT, "not a file"), path, "head")
        return ObjectMeta(path, st.st_size, _mtime(st))

    def size(self, path: str) -> int:
        return self.head(path).size

    def identity(self, path: str) -> tuple[object, ...] | None:
        """The state of the file at ``path`` as an open :class:`LocalFile` names it
        (:func:`file_identity`), from one ``stat`` without opening it; None when it cannot
        be read (opening it then raises the typed error)."""
        self.stats.add("heads")
        try:
            return file_identity(path, os.stat(path))
        except OSError:
            return None

    def exists(self, path: str) -> bool:
        self.stats.add("heads")
        return os.path.isfile(path)

    def open(self, path: str) -> LocalFile:
        return LocalFile(path, self.stats, self.release_pages)

    def read_range(self, path: str, offset: int, length: int) -> np.ndarray:
        f = self.open(path)
        try:
            return f.read(offset, length)
        finally:
            f.close()

    def read_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[np.ndarray]:
        f = self.open(path)
        try:
            return f.read_ranges(ranges)
        finally:
            f.close()

    def read_ranges_into(
        self, path: str, ranges: Sequence[tuple[int, int]], out: np.ndarray | memoryview, offsets: Sequence[int]
    ) -> None:
        """Copy the ranges from the file's memory map (``pread`` when unmapped) into ``out``."""
        f = self.open(path)
        try:
            copy_into(f.read_ranges(ranges), out, offsets)
        finally:
            f.close()

    def read_tail(self, path: str, length: int) -> tuple[np.ndarray, int]:
        f = self.open(path)
        try:
            n = min(length, f.size)
            return f.read(f.size - n, n), f.size
        finally:
            f.close()

    def get(self, path: str) -> bytes:
        # (descriptor calls: a buffered file object adds an ioctl, two lseeks and an fstat;
        # a directory raises IsADirectoryError at the read)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                want = os.fstat(fd).st_size + 1  # the whole file, then the end in one more read
                chunks = []
                while chunk := os.read(fd, want):
                    chunks.append(chunk)
                    want = 1 << 20
            finally:
                os.close(fd)
        except OSError as exc:
            raise translate(exc, path, "read") from exc
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self.stats.add_gets(1, len(data))
        return data

    def _stage(self, path: str, data: bytes | memoryview, *, sync: bool = True) -> str:
        staging = _staging(path)
        try:
            with _create_exclusive(staging, path) as fh:
                fh.write(data)
                fh.flush()
                if sync:
                    os.fsync(fh.fileno())
        except OSError as exc:
            _unlink_quietly(staging)
            raise translate(exc, path, "write") from exc
        return staging

    def put(self, path: str, data: bytes | memoryview) -> None:
        staging = self._stage(path, data)
        try:
            os.replace(staging, path)
        except OSError as exc:
            _unlink_quietly(staging)
            raise translate(exc, path, "write") from exc
        self.stats.add("puts", 1, len(data))

    def put_if_absent(self, path: str, data: bytes | memoryview) -> None:
        self._publish_staged(self._stage(path, data), path, data)

    def overwrite_in_place(self, path: str, data: bytes) -> bool:
        """Write ``data`` over the existing small file ``path`` (one ``pwrite`` at offset 0,
        no new inode, no rename), padded with trailing spaces to the file's current length;
        True when done.  False, with nothing written, where ``path`` is missing, not a
        regular file, a symbolic link, hard-linked elsewhere (``st_nlink != 1``: a dataset
        copied with ``cp -al`` shares it) or over :data:`IN_PLACE_LIMIT` bytes: the caller
        then puts a new file.

        Only for the version hint, a JSON document read as a hint: not atomic (a reader racing
        the write can see old and new bytes mixed, which hint readers, pylance's and ours,
        check and fall back from), not synced.  A new file costs ext4 an inode allocation and
        the rename freeing the old one, each a journal operation that waits behind any
        journal commit in progress (0.05-1 ms here); rewriting the hint's one block does not."""
        if len(data) > IN_PLACE_LIMIT:
            return False
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            # writers of this file take turns (advisory: another writer's shorter text padded
            # against a stale length would leave stray bytes); readers take no lock
            fcntl.flock(fd, fcntl.LOCK_EX)
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_size > IN_PLACE_LIMIT:
                return False
            padded = bytes(data) + b" " * max(0, st.st_size - len(data))
            if os.pwrite(fd, padded, 0) != len(padded):
                return False  # short write (disk full): the caller's put replaces the file
        except OSError:
            return False
        finally:
            os.close(fd)
        self.stats.add("puts", 1, len(padded))
        return True

    def stage(self, path: str) -> LocalWriter:
        """A staging file for a later :meth:`put_if_absent_after_sync` of ``path`` (or of
        another name in its directory), created now in the background so that the put does
        not wait for the file system to create it.  Hand it to that put (which consumes it,
        whatever the outcome) or :meth:`LocalWriter.abort` it."""
        return LocalWriter(self, path)

    def put_if_absent_after_sync(self, path: str, data: bytes | memoryview, paths: Sequence[str],
                                 staged: LocalWriter | None = None, landed: Sequence[Future[Any]] = ()) -> None:
        """:meth:`sync` ``paths`` and :meth:`put_if_absent` ``path``, with one round of
        fsyncs: the new file's staging copy (which no reader sees) is fsync'd together with
        ``paths``, and hard-linked to ``path`` only once all of them are durable.  A commit's
        manifest costs one fsync wait instead of two.

        ``staged``: an empty staging file from :meth:`stage` to write ``data`` into (it is
        consumed: removed, or linked to ``path``, whatever the outcome).

        ``landed``: background writes (a commit's transaction file) that must have ended
        before ``path`` appears, waited for once the fsyncs are over: they run while this
        thread waits on the disk (it holds no GIL then); the first failure is raised, with
        nothing published."""
        if staged is None:
            staging = self._stage(path, data, sync=False)
        else:
            staging = staged.fill(data)
        try:
            self.sync([staging, *paths])
            for future in landed:
                future.result()
        except BaseException:
            _unlink_quietly(staging)
            raise
        self._publish_staged(staging, path, data)

    def _publish_staged(self, staging: str, path: str, data: bytes | memoryview) -> None:
        """Link the durable ``staging`` file to ``path`` if nothing is there (else
        ``ObjectExistsError``); the staging file is removed either way."""
        try:
            try:
                os.link(staging, path)
            except OSError as exc:
                if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
                    raise
                # No hard links here: create the target exclusively and copy the bytes.
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                try:
                    os.write(fd, bytes(data))
                    os.fsync(fd)
                finally:
                    os.close(fd)
        except OSError as exc:
            raise translate(exc, path, "conditional put") from exc
        finally:
            _unlink_quietly(staging)
        self.stats.add("puts", 1, len(data))

    def delete(self, path: str) -> None:
        self.stats.add("deletes")
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except IsADirectoryError:
            pass
        except OSError as exc:
            raise translate(exc, path, "delete") from exc

    def remove_empty_directories(self, prefix: str) -> None:
        """Remove the directories under ``prefix`` (and ``prefix`` itself) that hold no
        file, deepest first: what deleting every object of a dataset leaves on a local file
        system (object stores have no directories).  A directory that is not empty stays."""
        if not os.path.isdir(prefix):
            return
        for dirpath, _dirnames, _files in sorted(os.walk(prefix), key=lambda entry: -len(entry[0])):
            try:
                os.rmdir(dirpath)
            except OSError:  # not empty (a file appeared, or a stray one stays)
                pass

    def has_objects(self, prefix: str) -> bool:
        """Whether anything is at ``prefix`` (a directory, an empty one included, or a file):
        one ``stat``."""
        self.stats.add("heads")
        return os.path.exists(prefix)

    def list(self, prefix: str) -> list[ObjectMeta]:
        self.stats.add("lists")
        out: list[ObjectMeta] = []
        if not os.path.isdir(prefix):
            return out
        try:
            for dirpath, _dirs, files in os.walk(prefix):
                for name in files:
                    if name.startswith(STAGING_PREFIX):
                        continue
                    full = os.path.join(dirpath, name)
                    try:
                        st = os.stat(full)
                        out.append(ObjectMeta(full, st.st_size, _mtime(st)))
                    except FileNotFoundError:
                        continue
        except OSError as exc:
            raise translate(exc, prefix, "list") from exc
        out.sort(key=lambda m: m.path)
        return out

    def list_staging(self, prefix: str) -> builtins.list[ObjectMeta]:
        """The staging files (:data:`STAGING_NAME`) beneath ``prefix``, which :meth:`list`
        leaves out: a writer killed between writing one and publishing it leaves it behind
        (cleanup removes old ones)."""
        self.stats.add("lists")
        out: builtins.list[ObjectMeta] = []
        if not os.path.isdir(prefix):
            return out
        try:
            for dirpath, _dirs, files in os.walk(prefix):
                for name in files:
                    if not STAGING_NAME.fullmatch(name):
                        continue
                    full = os.path.join(dirpath, name)
                    try:
                        st = os.stat(full)
                    except FileNotFoundError:
                        continue  # published or removed meanwhile
                    out.append(ObjectMeta(full, st.st_size, _mtime(st)))
        except OSError as exc:
            raise translate(exc, prefix, "list") from exc
        out.sort(key=lambda m: m.path)
        return out

    def open_writer(self, path: str) -> LocalWriter:
        return LocalWriter(self, path)

    def sync(self, paths: Sequence[str]) -> None:
        """fsync each file (by path: Linux writes back a file's dirty pages whichever
        descriptor asks), several at once so their write-backs overlap (the first in the
        calling thread, the others in the pool's); a file already synced costs one system
        call.  Every fsync has ended when this returns, the first failure raised."""
        if not paths:
            return
        others = [waiting_in_background(_fsync_path, path) for path in paths[1:]]
        try:
            _fsync_path(paths[0])
        finally:
            for future in others:
                future.exception()  # wait for each: none is left running
        for future in others:
            future.result()


def _fsync_path(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise translate(exc, path, "sync") from exc


def _make_local(release_pages: bool) -> LocalStore:
    return LOCAL if release_pages else LocalStore(release_pages=release_pages)


#: The process's shared local store (``resolve`` hands it out for every local path).
LOCAL = LocalStore()
