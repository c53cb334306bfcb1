# SPDX-License-Identifier: Apache-2.0
"""Turning back-end exceptions (``OSError`` from the file system, obstore's errors, fsspec's)
into our typed :class:`~lance_gpu.errors.StorageError` family, each naming the URI."""

from __future__ import annotations

import errno as _errno

from lance_gpu.errors import (
    ConditionalPutUnsupportedError,
    LanceGpuError,
    ObjectExistsError,
    ObjectNotFoundError,
    StorageConnectionError,
    StorageError,
    StoragePermissionError,
    StorageTimeoutError,
)

#: A missing bucket or container (S3 and GCS ``NoSuchBucket``, Azure ``ContainerNotFound``),
#: which obstore reports as a generic error.
_MISSING_WORDS = ("nosuchbucket", "containernotfound")
_TIMEOUT_WORDS = ("timed out", "deadline has elapsed", "operation timeout", "request timeout")
_CONNECT_WORDS = ("connection refused", "connect error", "error sending request", "connection reset", "dns error", "tcp connect")
_THROTTLE_WORDS = ("slowdown", "slow down", "throttl", "too many requests", "429", "503")
_AUTH_WORDS = ("accessdenied", "access denied", "forbidden", "403", "invalidaccesskeyid", "signaturedoesnotmatch", "unauthenticated", "401")


def translate(exc: BaseException, uri: str, action: str) -> StorageError:
    """The typed error for ``exc`` raised while ``action`` (``"read"``, ``"write"``...) on ``uri``.

    Already typed errors pass through unchanged.
    """
    if isinstance(exc, StorageError):
        return exc
    name = type(exc).__name__
    text = str(exc).split("\n\nDebug source:")[0].strip()
    low = str(exc).lower()
    reason = f"{action} failed: {text or name}"
    code = getattr(exc, "errno", None) if isinstance(exc, OSError) else None
    if name == "NotSupportedError" and action == "conditional put":
        return ConditionalPutUnsupportedError(uri, "the store does not support conditional (put-if-absent) writes")
    if isinstance(exc, FileExistsError) or name in ("AlreadyExistsError", "PreconditionError"):
        return ObjectExistsError(uri, f"{action} failed: the object already exists", _errno.EEXIST)
    if isinstance(exc, FileNotFoundError) or name == "NotFoundError" or any(w in low for w in _MISSING_WORDS):
        return ObjectNotFoundError(uri, f"{action} failed: no such object or bucket", _errno.ENOENT)
    if isinstance(exc, PermissionError) or name in ("PermissionDeniedError", "UnauthenticatedError"):
        return StoragePermissionError(uri, reason, _errno.EACCES)
    if isinstance(exc, ConnectionError):
        return StorageConnectionError(uri, reason, _errno.ECONNREFUSED)
    if isinstance(exc, TimeoutError) or any(w in low for w in _TIMEOUT_WORDS):
        return StorageTimeoutError(uri, reason, _errno.ETIMEDOUT)
    if any(w in low for w in _CONNECT_WORDS):
        return StorageConnectionError(uri, reason, _errno.ECONNREFUSED)
    if any(w in low for w in _AUTH_WORDS):
        return StoragePermissionError(uri, reason, _errno.EACCES)
    if any(w in low for w in _THROTTLE_WORDS):
        return StorageError(uri, f"{action} failed: throttled by the store after retries ({text})", _errno.EAGAIN)
    return StorageError(uri, reason, code)


def is_backend_error(exc: BaseException) -> bool:
    """True for exceptions :func:`translate` should type (not our own non-storage errors)."""
    if isinstance(exc, StorageError):
        return True
    if isinstance(exc, LanceGpuError):
        return False
    if isinstance(exc, OSError):
        return True
    mod = type(exc).__module__ or ""
    return mod.startswith(("obstore", "fsspec", "aiohttp"))
