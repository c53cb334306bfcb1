"""The on-disk cache of compiled CPU kernels: where it lives, how it is keyed, how it is written.

Every njit dispatcher of this repository (``cuda_kernels`` drivers and cores, the
``lance_gpu`` loops) is created through :func:`njit`, a drop-in for ``numba.njit``
whose ``cache=True`` stores machine code in one per-user directory instead of
numba's ``__pycache__`` next to the sources (which an installed package may not be
able to write, and which numba invalidates per source file only).

Location (the first that can be created and written by this user wins):

1. ``$LANCE_GPU_CACHE_DIR`` if set.  An explicit location is never silently
   replaced: if it cannot be written, kernels compile in memory only.
2. ``$NUMBA_CACHE_DIR/lance_gpu`` if numba's own cache override is set.
3. ``$XDG_CACHE_HOME/lance_gpu``, else ``~/.cache/lance_gpu``.
4. ``<tempdir>/lance_gpu-<uid>`` (for workers without a writable home), used only
   when the directory is owned by this user.

If none is writable, kernels compile in memory (every process pays the compile
time; reads still work).  Directories are created with mode 0o700: cache
entries are pickles, so nobody else must be able to plant them.

Keys.  Under the location, each (numba version, Python version, kernel-source
fingerprint) gets its own directory ``numba-<version>-py<XY>-<fingerprint>``.
The fingerprint hashes the contents of every ``.py`` file of ``cuda_kernels``
and every ``lance_gpu`` module that mentions numba, so changing any kernel
source -- including a core inlined into a driver of another module, which
numba's per-file stamps miss -- recompiles everything.  Inside, numba's own
index keys each overload by signature, CPU target (name and features) and
bytecode hash, and the index also records the numba version.

Concurrency.  Spark workers and pool threads may compile and save the same
function at once.  Data files are named after a hash of their key (two
signatures never share a file), every file is written to a unique temporary
name and renamed into place, and index updates are serialised per function by
an ``fcntl`` lock on ``<index>.lock``, so concurrent writers cannot drop each
other's entries or point an index entry at another signature's code.  A cache
file that cannot be read or unpickled is a miss (the kernel recompiles and
rewrites it), never an error.

Fork safety.  numba's GNU OpenMP threading layer ("omp", the one numba picks when
``tbb`` is not installed) is not fork-safe: a process forked from one whose OpenMP
pool was started (numba starts it at the first ``numba.get_num_threads()`` or
``parallel=True`` call) is terminated ("fork() called from a process already using
GNU OpenMP") when it enters a parallel region.  Every ``parallel=True`` kernel made
by :func:`njit` (the ``cpu_driver(parallel=True)`` drivers included) is therefore a
:class:`ForkSafeKernel`: in such a child (marked by an ``os.register_at_fork`` hook,
see :func:`serial_only`) calls run a serial compile of the same function --
``prange`` is then ``range``, the results are the same -- compiled on first use in
such a child only and cached under its own name (``<qualname>__serial``; numba's
cache key does not tell ``parallel=True`` from ``False``).  Other processes never
compile or load the serial variants.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import sys
import tempfile
import threading
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "CACHE_DIR_ENV",
    "ForkSafeKernel",
    "cache_dir",
    "cache_stats",
    "enable_cache",
    "njit",
    "serial_only",
    "source_fingerprint",
]

#: Environment variable naming the kernel cache directory (see the module docstring).
CACHE_DIR_ENV = "LANCE_GPU_CACHE_DIR"

_log = logging.getLogger(__name__)
_lock = threading.Lock()
_resolved: list[Path | None] = []  # [cache_dir()] once resolved
_checked_paths: set[str] = set()  # per-module cache directories known to be writable
_ROOTS = (Path(__file__).resolve().parent, Path(__file__).resolve().parent.parent / "lance_gpu")


def source_fingerprint() -> str:
    """Hash of every kernel source: all of ``cuda_kernels`` and each ``lance_gpu`` module using numba."""
    h = hashlib.sha256()
    for root in _ROOTS:
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*.py")):
            data = path.read_bytes()
            if root.name == "cuda_kernels" or b"numba" in data or b"cuda_kernels" in data:
                h.update(str(path.relative_to(root.parent)).encode())
                h.update(b"\0")
                h.update(hashlib.sha256(data).digest())
    return h.hexdigest()[:16]


def _candidates() -> tuple[list[Path], bool]:
    """Base directories to try, in order, and whether the first one was given explicitly."""
    explicit = os.environ.get(CACHE_DIR_ENV)
    if explicit:
        return [Path(explicit)], True
    out = []
    numba_dir = os.environ.get("NUMBA_CACHE_DIR")
    if numba_dir:
        out.append(Path(numba_dir) / "lance_gpu")
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        out.append(Path(xdg) / "lance_gpu")
    with contextlib.suppress(RuntimeError, KeyError):
        out.append(Path.home() / ".cache" / "lance_gpu")
    uid = os.getuid() if hasattr(os, "getuid") else 0
    out.append(Path(tempfile.gettempdir()) / f"lance_gpu-{uid}")
    return out, False


def _usable(path: Path) -> bool:
    """Create ``path`` (0o700) if needed; True if this user owns it and can write files in it."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        if hasattr(os, "getuid") and path.stat().st_uid != os.getuid():
            return False
        tempfile.TemporaryFile(dir=path).close()
    except OSError:
        return False
    return True


def cache_dir() -> Path | None:
    """The directory compiled kernels are cached in, or None when no location is writable.

    Resolved once per process (see the module docstring for the rules).
    """
    if _resolved:
        return _resolved[0]
    with _lock:
        if _resolved:
            return _resolved[0]
        import numba

        leaf = f"numba-{numba.__version__}-py{sys.version_info[0]}{sys.version_info[1]}-{source_fingerprint_cached()}"
        bases, explicit = _candidates()
        found = None
        for base in bases:
            if _usable(base / leaf):
                found = base / leaf
                break
        if found is None:
            where = bases[0] if explicit else ", ".join(map(str, bases))
            _log.warning("no writable kernel cache directory (%s): kernels compile in memory in every process", where)
        _resolved.append(found)
        return found


def _reset_for_tests() -> None:
    """Forget the resolved directory (tests change the environment between calls)."""
    with _lock:
        _resolved.clear()
        _checked_paths.clear()


def _make_cache_classes() -> type:
    """Build the numba cache classes (deferred so that importing this module does not import numba)."""
    import pickle

    from numba.core import caching

    class KernelCacheLocator(caching._CacheLocator):
        """Puts a function's cache files under ``cache_dir()/<module>``."""

        def __init__(self, py_func: Callable[..., Any], path: Path) -> None:
            self._py_file = py_func.__code__.co_filename
            self._lineno = py_func.__code__.co_firstlineno
            self._path = str(path / py_func.__module__)

        def ensure_cache_path(self) -> None:
            if self._path in _checked_paths:  # once per directory and process
                return
            os.makedirs(self._path, mode=0o700, exist_ok=True)
            tempfile.TemporaryFile(dir=self._path).close()
            _checked_paths.add(self._path)

        def get_cache_path(self) -> str:
            return self._path

        def get_source_stamp(self) -> str:
            # The directory is already per fingerprint; the stamp repeats it so that an index
            # copied from elsewhere is still refused.
            return source_fingerprint_cached()

        def get_disambiguator(self) -> str:
            return str(self._lineno)

        @classmethod
        def from_function(cls, py_func: Callable[..., Any], py_file: str) -> KernelCacheLocator | None:
            path = cache_dir()
            if path is None:
                return None
            self = cls(py_func, path)
            try:
                self.ensure_cache_path()
            except OSError:
                return None
            return self

    class KernelCacheImpl(caching.CompileResultCacheImpl):
        _locator_classes = [KernelCacheLocator]  # noqa: RUF012 - numba's class attribute

    class KernelCacheFile(caching.IndexDataCacheFile):
        """numba's index + data files with hash-named data files and locked index updates."""

        def save(self, key: Any, data: Any) -> None:
            key_hash = hashlib.sha256(pickle.dumps(key, protocol=4)).hexdigest()[:20]
            name = f"{self._index_name[: -len('.nbi')]}.{key_hash}.nbc"
            with self._index_lock():
                self._save_data(name, data)
                overloads = self._load_index()
                if overloads.get(key) != name:
                    overloads[key] = name
                    self._save_index(overloads)

        def load(self, key: Any) -> Any:
            try:
                return super().load(key)
            except Exception as exc:  # noqa: BLE001 - any unreadable entry (truncated, foreign pickle) is a miss
                _log.debug("kernel cache entry unreadable in %s: %r", self._cache_path, exc)
                return None

        def _load_index(self) -> dict[Any, str]:
            try:
                return super()._load_index()
            except Exception as exc:  # noqa: BLE001 - an unreadable index is an empty one
                _log.debug("kernel cache index unreadable: %s: %r", self._index_path, exc)
                return {}

        @contextlib.contextmanager
        def _index_lock(self) -> Iterator[None]:
            try:
                import fcntl
            except ImportError:  # pragma: no cover - Windows: hash-named data files still never collide
                yield
                return
            with open(self._index_path + ".lock", "a+b") as fh:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(fh.fileno(), fcntl.LOCK_UN)

    class KernelCache(caching.FunctionCache):
        """numba's FunctionCache with the location and file handling above."""

        _impl_class = KernelCacheImpl

        def __init__(self, py_func: Callable[..., Any]) -> None:
            super().__init__(py_func)
            self._cache_file = KernelCacheFile(
                cache_path=self._cache_path,
                filename_base=self._impl.filename_base,
                source_stamp=self._impl.locator.get_source_stamp(),
            )

    return KernelCache


_fingerprint: list[str] = []


def source_fingerprint_cached() -> str:
    """:func:`source_fingerprint`, computed once per process."""
    if not _fingerprint:
        _fingerprint.append(source_fingerprint())
    return _fingerprint[0]


_cache_class: list[type] = []


def enable_cache(dispatcher: Any) -> bool:
    """Attach the kernel cache to a numba CPU dispatcher; False (in-memory only) if no location is usable."""
    if not _cache_class:
        with _lock:
            if not _cache_class:
                _cache_class.append(_make_cache_classes())
    try:
        dispatcher._cache = _cache_class[0](dispatcher.py_func)
    except (RuntimeError, OSError) as exc:
        _log.debug("kernel cache disabled for %s: %r", dispatcher.py_func.__qualname__, exc)
        return False
    return True


_dispatchers: list[Any] = []


def cache_stats() -> dict[str, dict[str, int]]:
    """Per dispatcher made by :func:`njit` in this process (``module.qualname``): compiled
    signatures, loaded from the cache (``hits``) or compiled (``misses``)."""
    out: dict[str, dict[str, int]] = {}
    for d in tuple(_dispatchers):
        stats = d.stats
        hits = sum(stats.cache_hits.values())
        misses = sum(stats.cache_misses.values())
        if hits or misses or d.signatures:
            name = f"{d.py_func.__module__}.{d.py_func.__qualname__}"
            entry = out.setdefault(name, {"signatures": 0, "hits": 0, "misses": 0})
            entry["signatures"] += len(d.signatures)
            entry["hits"] += hits
            entry["misses"] += misses
    return out


_serial_only: list[bool] = [False]  # [this process must not enter a GNU OpenMP parallel region]


def _after_fork_in_child() -> None:
    """``os.register_at_fork`` hook: mark a child forked from a process whose GNU OpenMP
    pool numba started (numba terminates such a child when it runs a parallel region).

    Reads numba's state without importing anything: a process that never imported
    numba's parallel backend has no pool.  The mark is inherited by later forks.
    """
    parallel = sys.modules.get("numba.np.ufunc.parallel")
    if parallel is None or not getattr(parallel, "_is_initialized", False):
        return
    if getattr(parallel, "_threading_layer", None) != "omp":  # tbb and workqueue are fork-safe
        return
    omppool = sys.modules.get("numba.np.ufunc.omppool")
    if getattr(omppool, "openmp_vendor", "GNU") != "GNU":  # Intel's OpenMP is fork-safe
        return
    _serial_only[0] = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def serial_only() -> bool:
    """Whether this process is a fork of one that started numba's GNU OpenMP pool, so that
    ``parallel=True`` kernels run their serial variants here (see "Fork safety" above)."""
    return _serial_only[0]


class ForkSafeKernel:
    """A ``parallel=True`` njit dispatcher that runs a serial compile of the same function
    in a process where :func:`serial_only` holds.

    ``dispatcher`` is the parallel numba dispatcher (compiled code calling the kernel must
    be given that one: this wrapper is for calls from Python); other calls run ``call``
    (default: ``dispatcher``; a wrapper of it, such as a numpy twin, otherwise).  The
    serial variant is compiled with the same options but ``parallel``, on its first call,
    under the name ``<qualname>__serial`` in the kernel cache.
    """

    def __init__(self, dispatcher: Any, options: dict[str, Any], cache: bool,
                 call: Callable[..., Any] | None = None) -> None:
        self.dispatcher = dispatcher
        self._call = dispatcher if call is None else call
        self.py_func = dispatcher.py_func
        self.__name__ = dispatcher.py_func.__name__
        self.__qualname__ = dispatcher.py_func.__qualname__
        self.__module__ = dispatcher.py_func.__module__
        self.__doc__ = dispatcher.py_func.__doc__
        self._options = {k: v for k, v in options.items() if k != "parallel"}
        self._cache = cache
        self._serial: Any = None
        self._serial_lock = threading.Lock()

    @property
    def serial(self) -> Any:
        """The serial njit dispatcher of the same function (built on first use)."""
        if self._serial is None:
            with self._serial_lock:
                if self._serial is None:
                    f = self.py_func
                    copy = types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__, f.__closure__)
                    copy.__qualname__ = f"{f.__qualname__}__serial"
                    copy.__module__ = f.__module__
                    copy.__doc__ = f.__doc__
                    copy.__kwdefaults__ = f.__kwdefaults__
                    self._serial = njit(cache=self._cache, **self._options)(copy)
        return self._serial

    def __call__(self, *args: Any) -> Any:
        if _serial_only[0]:
            return self.serial(*args)
        return self._call(*args)

    def __repr__(self) -> str:
        return f"<fork-safe parallel kernel {self.__module__}.{self.__qualname__}>"


def njit(func: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``numba.njit`` whose ``cache=True`` uses the kernel cache (:func:`cache_dir`) instead of numba's.

    Usable as ``@njit``, ``@njit(**options)`` or ``njit(**options)(func)``; compilation stays lazy
    (on first call, per signature).  ``parallel=True`` returns a :class:`ForkSafeKernel`
    (see "Fork safety" in the module docstring).
    """
    cache = bool(options.pop("cache", False))

    def wrap(f: Callable[..., Any]) -> Any:
        import numba

        dispatcher = numba.njit(**options)(f)
        if not hasattr(dispatcher, "stats"):  # NUMBA_DISABLE_JIT=1: the plain Python function
            return dispatcher
        if cache:
            enable_cache(dispatcher)
        _dispatchers.append(dispatcher)
        if options.get("parallel"):
            return ForkSafeKernel(dispatcher, options, cache)
        return dispatcher

    if func is None:
        return wrap
    return wrap(func)
