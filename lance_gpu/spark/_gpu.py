# SPDX-License-Identifier: Apache-2.0
"""Executor-side GPU etiquette for Spark tasks: which device, and how many decodes at once.

* Device: the RAPIDS Accelerator (``spark.rapids.sql.python.gpu.enabled``) starts Python
  workers with ``CUDA_VISIBLE_DEVICES`` set to the executor's GPU, so the first visible device
  is ours. Without it, Spark's GPU scheduling assigns addresses to the task
  (``TaskContext.resources()["gpu"]``), which are ordinals among all devices. We never pick a
  GPU by enumerating them.
* Concurrency: every Python worker on an executor is its own process, so the cap on
  concurrent GPU decodes (``LANCE_GPU_MAX_CONCURRENT_DECODES``, default 1) is a set of
  ``flock``-ed slot files per device; a crashed worker releases its slot with its file
  descriptors. Only GPU decodes take a slot: CPU decodes never wait.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Iterator

__all__ = ["MAX_DECODES_ENV", "decode_slot", "max_concurrent_decodes", "task_gpu"]

MAX_DECODES_ENV = "LANCE_GPU_MAX_CONCURRENT_DECODES"
LOCK_DIR_ENV = "LANCE_GPU_LOCK_DIR"


def max_concurrent_decodes() -> int:
    """``LANCE_GPU_MAX_CONCURRENT_DECODES`` (a positive integer, default 1)."""
    raw = os.environ.get(MAX_DECODES_ENV, "").strip()
    if not raw:
        return 1
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        msg = f"{MAX_DECODES_ENV} must be a positive integer, not {raw!r}"
        raise ValueError(msg)
    return n


def task_gpu() -> tuple[int, str]:
    """(CUDA ordinal to use in this process, a key naming the physical device) for this task."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() not in ("", "-1"):
        return 0, visible.split(",")[0].strip()
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        gpus = ctx.resources().get("gpu") if ctx is not None else None
        if gpus is not None and gpus.addresses:
            addr = gpus.addresses[0]
            return int(addr), addr
    except (ImportError, ValueError, AttributeError):
        pass
    return 0, "0"


def _lock_dir() -> str:
    path = os.environ.get(LOCK_DIR_ENV) or os.path.join(tempfile.gettempdir(), "lance_gpu_decode_slots")
    os.makedirs(path, exist_ok=True)
    return path


@contextlib.contextmanager
def decode_slot(device_key: str, *, poll_s: float = 0.005, max_poll_s: float = 0.1) -> Iterator[int]:
    """Hold one of the ``max_concurrent_decodes()`` decode slots of ``device_key`` (blocking)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no cross-process cap
        yield -1
        return
    slots = max_concurrent_decodes()
    safe_key = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in device_key)
    paths = [os.path.join(_lock_dir(), f"gpu-{safe_key}.slot{i}.lock") for i in range(slots)]
    fds = [os.open(p, os.O_RDWR | os.O_CREAT, 0o666) for p in paths]
    held = -1
    try:
        delay = poll_s
        while held < 0:
            for i, fd in enumerate(fds):
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue
                held = i
                break
            if held < 0:
                time.sleep(delay)
                delay = min(delay * 2, max_poll_s)
        yield held
    finally:
        if held >= 0:
            fcntl.flock(fds[held], fcntl.LOCK_UN)
        for fd in fds:
            os.close(fd)
