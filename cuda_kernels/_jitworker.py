"""The background compile worker of :mod:`cuda_kernels._jitcache` (``python -m cuda_kernels._jitworker``).

Reads one request per line on stdin -- base64 of a pickled ``(module, qualname,
argument types)`` -- and compiles that kernel for those types into the kernel
cache (``$LANCE_GPU_CACHE_DIR``, set by the parent to its resolved base; twins
are off here).  Requests are served one at a time under an exclusive ``fcntl``
lock on ``<cache dir>/compile-worker.lock``, so the workers of concurrent
processes compile each signature once (the later ones load it from the cache).
Each finished request (compiled, or failed) is echoed on stdout, which the parent
reads to load the compiled code.  Exits at end of input, i.e. when its parent has
closed the pipe (or exited) and every request is done.  Errors are written to stderr (the parent points it at
``<cache dir>/compile-worker.log``) and skip that request only.
"""

from __future__ import annotations

import base64
import contextlib
import importlib
import os
import pickle
import sys
import traceback
from collections.abc import Iterator
from typing import Any


def _dispatcher(module: str, qualname: str) -> Any:
    """The numba dispatcher behind a module-level kernel (plain, twinned or a CPU driver)."""
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    from cuda_kernels._jitcache import _compiled

    return _compiled(obj)


@contextlib.contextmanager
def _turn(lock_path: str) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: concurrent workers may compile twice
        yield
        return
    with open(lock_path, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def main() -> int:
    from cuda_kernels._jitcache import cache_dir

    with contextlib.suppress(OSError, AttributeError):
        os.nice(10)  # background work: the reading process comes first
    base = cache_dir()
    if base is None:
        return 1
    lock_path = str(base / "compile-worker.lock")
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        try:
            module, qualname, sig = pickle.loads(base64.b64decode(line))
            with _turn(lock_path):
                _dispatcher(module, qualname).compile(sig)
        except Exception:  # noqa: BLE001 - one bad request must not stop the others
            traceback.print_exc()
        with contextlib.suppress(OSError, ValueError):  # the parent may be gone: fine
            sys.stdout.buffer.write(line.strip() + b"\n")  # done (the parent loads it or keeps the twin)
            sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
