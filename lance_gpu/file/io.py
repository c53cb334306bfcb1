# SPDX-License-Identifier: Apache-2.0
"""Byte-range reads from local files.

Files are memory-mapped read-only and ranges are returned as zero-copy views: Lance data
files are immutable once committed, fixed-width pages then reach Arrow without a copy, and
only the pages a query touches are ever read from disk.  Every read names its file in errors. Reads that fall outside the file, or that return fewer
bytes than asked for, raise :class:`~lance_gpu.errors.CorruptFileError`: a truncated file
never turns into wrong data.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterable, Sequence

import numpy as np

from lance_gpu.errors import CorruptFileError, DatasetNotFoundError

# Ranges closer than this are read with one system call (the gap is read and dropped).
COALESCE_GAP = 64 * 1024


class RangeReader:
    """Positional reads of one local file.

    The file is opened once and read with ``os.pread`` so that concurrent readers (threads
    decoding different columns) need no locking.
    """

    __slots__ = ("path", "size", "_fd", "_map", "_mm")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        try:
            self._fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError as exc:
            msg = f"data file not found: {self.path}"
            raise DatasetNotFoundError(msg) from exc
        self.size = os.fstat(self._fd).st_size
        self._map: np.ndarray | None = None
        self._mm: mmap.mmap | None = None
        if self.size:
            try:
                self._mm = mmap.mmap(self._fd, self.size, prot=mmap.PROT_READ)
                self._map = np.frombuffer(self._mm, dtype=np.uint8)
            except (OSError, ValueError):
                self._map = None  # fall back to positional reads

    def close(self) -> None:
        # The mapping stays alive as long as arrays reference it; only the descriptor closes.
        self._map = None
        self._mm = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> RangeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass

    def read(self, offset: int, size: int) -> np.ndarray:
        """Return ``size`` bytes at ``offset`` as a read-only-safe uint8 array."""
        if offset < 0 or size < 0 or offset + size > self.size:
            raise CorruptFileError(
                self.path,
                f"byte range [{offset}, {offset + size}) lies outside the file of {self.size} bytes",
            )
        if self._map is not None:
            return self._map[offset : offset + size]
        out = np.empty(size, dtype=np.uint8)
        done = 0
        view = memoryview(out)
        while done < size:
            n = os.preadv(self._fd, [view[done:]], offset + done)
            if n <= 0:
                raise CorruptFileError(self.path, f"short read at offset {offset + done}")
            done += n
        return out

    def release(self, ranges: Sequence[tuple[int, int]], keep: Sequence[tuple[int, int]] = ()) -> None:
        """Drop the mapped pages of ``ranges`` from this process's memory once decoded.

        The file stays in the page cache and a later read faults the pages back in, so this
        is always safe; it keeps a scan's resident memory near the decoded size.  Address
        ranges in ``keep`` (``(address, size)`` of buffers still referenced zero-copy) are
        left alone.
        """
        if self._mm is None or self._map is None or not hasattr(self._mm, "madvise"):
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

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[np.ndarray]:
        """Read many ``(offset, size)`` ranges, coalescing near neighbours into one read.

        The returned arrays are views into the coalesced reads, in the order asked.
        """
        if not ranges:
            return []
        order = sorted(range(len(ranges)), key=lambda i: ranges[i][0])
        out: list[np.ndarray | None] = [None] * len(ranges)
        for group in _coalesce(order, ranges):
            start = ranges[group[0]][0]
            end = max(ranges[i][0] + ranges[i][1] for i in group)
            block = self.read(start, end - start)
            for i in group:
                off, size = ranges[i]
                out[i] = block[off - start : off - start + size]
        return out  # type: ignore[return-value]


def _coalesce(order: Iterable[int], ranges: Sequence[tuple[int, int]]) -> list[list[int]]:
    groups: list[list[int]] = []
    end = -1
    for i in order:
        off, size = ranges[i]
        if groups and off - end <= COALESCE_GAP:
            groups[-1].append(i)
            end = max(end, off + size)
        else:
            groups.append([i])
            end = off + size
    return groups
