# SPDX-License-Identifier: Apache-2.0
"""A store wrapper that fails on purpose: the Nth put (or read, list, delete) raises a chosen
error, as a full disk, a denied permission, an I/O error or a network fault would.

Used by the tests to show that every failure is typed, leaves the dataset at its last
committed version and leaves no staging files.  ``after=True`` makes a put land and *then*
fail (a lost response): commits must find out by reading the object back.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from lance_gpu.io._errors import translate
from lance_gpu.io.store import BufferedWriter, ObjectMeta, ObjectStore, StoreFile, read_ranges_into

__all__ = ["FaultInjectingStore", "make_fault"]

_FAULTS = {
    "ENOSPC": lambda: OSError(errno.ENOSPC, "No space left on device"),
    "EACCES": lambda: PermissionError(errno.EACCES, "Permission denied"),
    "EIO": lambda: OSError(errno.EIO, "Input/output error"),
    "timeout": lambda: TimeoutError("operation timed out"),
    "throttle": lambda: OSError("SlowDown: Please reduce your request rate (503)"),
    "refused": lambda: ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),
}


def make_fault(kind: str | BaseException) -> BaseException:
    """The raw exception for a fault name (``ENOSPC``, ``EACCES``, ``EIO``, ``timeout``,
    ``throttle``, ``refused``) or the exception itself."""
    if isinstance(kind, BaseException):
        return kind
    return _FAULTS[kind]()


class FaultInjectingStore:
    """Wraps a store; the ``nth`` (1-based) call of kind ``op`` (``"put"``: put,
    put_if_absent and writer closes; ``"read"``: every get, ranged or tail read; ``"list"``;
    ``"delete"``) and the ``times - 1`` after it raise ``error``, typed as the real store
    would type it.  ``op_filter`` (a substring) limits counting to matching keys.

    Parameters
    ----------
    inner : ObjectStore
        The store doing the real work.
    op : str
        Which kind of call fails.
    nth : int
        The first failing call of that kind (1-based).
    error : str or exception
        ``ENOSPC``, ``EACCES``, ``EIO``, ``timeout``, ``throttle``, ``refused`` or an exception.
    after : bool
        For puts: perform the put, then fail (the response was lost).
    """

    def __init__(
        self,
        inner: ObjectStore,
        *,
        op: str = "put",
        nth: int = 1,
        error: str | BaseException = "EIO",
        times: int = 1,
        after: bool = False,
        op_filter: str = "",
    ) -> None:
        self.inner = inner
        self.op = op
        self.nth = nth
        self.error = error
        self.times = times
        self.after = after
        self.op_filter = op_filter
        self.calls = 0
        self.failures = 0
        self._lock = threading.Lock()
        self.stats = inner.stats
        self.supports_conditional_put = inner.supports_conditional_put
        self.writable = inner.writable
        self.absolute_keys = getattr(inner, "absolute_keys", False)

    def _tick(self, op: str, path: str) -> bool:
        if op != self.op or (self.op_filter and self.op_filter not in path):
            return False
        with self._lock:
            self.calls += 1
            fire = self.nth <= self.calls < self.nth + self.times
            if fire:
                self.failures += 1
        return fire

    def _fail(self, path: str, action: str) -> None:
        exc = make_fault(self.error)
        raise translate(exc, self.inner.uri(path), action) from exc

    def uri(self, path: str) -> str:
        return self.inner.uri(path)

    def head(self, path: str) -> ObjectMeta:
        return self.inner.head(path)

    def size(self, path: str) -> int:
        return self.inner.size(path)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def read_range(self, path: str, offset: int, length: int) -> np.ndarray:
        if self._tick("read", path):
            self._fail(path, "read")
        return self.inner.read_range(path, offset, length)

    def read_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[np.ndarray]:
        if self._tick("read", path):
            self._fail(path, "read")
        return self.inner.read_ranges(path, ranges)

    def read_ranges_into(
        self, path: str, ranges: Sequence[tuple[int, int]], out: np.ndarray | memoryview, offsets: Sequence[int]
    ) -> None:
        if self._tick("read", path):
            self._fail(path, "read")
        read_ranges_into(self.inner, path, ranges, out, offsets)

    def read_tail(self, path: str, length: int) -> tuple[np.ndarray, int]:
        if self._tick("read", path):
            self._fail(path, "read")
        return self.inner.read_tail(path, length)

    def get(self, path: str) -> bytes:
        if self._tick("read", path):
            self._fail(path, "read")
        return self.inner.get(path)

    def _put(self, path: str, data: bytes | memoryview, fn: Any, action: str) -> None:
        if self._tick("put", path):
            if self.after:
                fn(path, data)
            self._fail(path, action)
        fn(path, data)

    def put(self, path: str, data: bytes | memoryview) -> None:
        self._put(path, data, self.inner.put, "write")

    def put_if_absent(self, path: str, data: bytes | memoryview) -> None:
        self._put(path, data, self.inner.put_if_absent, "conditional put")

    def delete(self, path: str) -> None:
        if self._tick("delete", path):
            self._fail(path, "delete")
        self.inner.delete(path)

    def list_staging(self, prefix: str) -> list[ObjectMeta]:
        """The inner store's staging files (none where it cannot list them)."""
        probe = getattr(self.inner, "list_staging", None)
        return list(probe(prefix)) if probe is not None else []

    def has_objects(self, prefix: str) -> bool:
        """The inner store's answer (``False`` where it cannot tell)."""
        probe = getattr(self.inner, "has_objects", None)
        return bool(probe(prefix)) if probe is not None else False

    def list(self, prefix: str) -> list[ObjectMeta]:
        if self._tick("list", prefix):
            self._fail(prefix, "list")
        return self.inner.list(prefix)

    def open(self, path: str) -> StoreFile:
        return StoreFile(self, path)

    def sync(self, paths: Sequence[str]) -> None:
        self.inner.sync(paths)

    def open_writer(self, path: str) -> BufferedWriter:
        return BufferedWriter(self, path)
