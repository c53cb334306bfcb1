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

Twins: no waiting for the compiler on a cold cache.  A kernel made with
``njit(cache=True, twin=f)`` (or ``cpu_driver(twin=f)``) is a
:class:`TwinnedKernel`: ``f`` is a numpy implementation of the same contract
(same arguments, same results, same writes into output arguments) for every
*valid* input; it returns ``NotImplemented`` for anything else (corrupt input,
an error to report), and the kernel then runs -- compiled in this process if
need be -- so error results are the kernel's own.  When a call's argument
types have no compiled code in this process:

1. if the cache holds them, they load (milliseconds, after numba's target
   context is set up: a second or more of imports once per process) and the
   kernel runs;
2. otherwise the twin runs, and the signature is sent to a background compile
   worker (:mod:`cuda_kernels._jitworker`, one ``python`` subprocess per
   process, niced), which compiles it into the cache.  This process never looks
   in the cache for that signature again: a thread of it loads the compiled code
   of everything its worker compiled once the worker has no request left (so
   loading, and setting up numba's target context, stay out of the first reads,
   which run on twins), and any later process loads it from the cache.  A
   signature sent by another process's worker is looked for at most every
   :data:`RECHECK_SECONDS`, and not before the kernel's cache index exists.

A process whose first read finds every kernel it needs twinned therefore imports
numba (to make the kernels' dispatchers) but never sets up its typing or target context,
nor compiles or loads anything, during that read.

Nothing at import.  :func:`njit` imports no numba: it returns a :class:`LazyDispatcher`
whose numba dispatcher is made at the kernel's first call (or first read of a dispatcher
attribute).  Kernel modules name numba, ``prange`` and intrinsics through stand-ins
(:data:`LAZY_NUMBA`, :data:`prange`, :func:`lazy_intrinsic`); when a dispatcher is made,
the globals of its function that are stand-ins or other lazy kernels are bound to what they
stand for, in a copy of the function (:func:`_bind_for_numba`), as
:mod:`cuda_kernels._target` binds cores for each target.  So ``import lance_gpu`` loads
neither numba nor llvmlite; a process that reads only metadata never does.

Small calls stay on twins until the context is up.  Loading cached code is cheap once
numba's CPU target context exists, but setting that context up costs a process ~0.4 s
of CPU (numba's registries, scipy where installed): more than a small read of a small
table takes in all.  So while this process has no target context, a call whose array
arguments hold at most :data:`SMALL_CALL_ELEMENTS` elements runs the twin without
looking in the cache (on a cold cache -- no index for the kernel yet -- it still asks the
worker to compile it, as above); a larger call (or any call once the context exists,
made by another kernel's load or compile) loads the cached code as above.  Once a process
has spent :data:`SMALL_TWIN_BUDGET_SECONDS` in such twin calls, it sets numba up too: a
twin call is slower than compiled code, and a process that keeps reading small tables
would pay that on every call.

Workers of concurrent processes take turns (an ``fcntl`` lock per request),
so a signature is compiled once; a worker outlives its process until its
requests are done.  Twins are off (every kernel compiles in the calling
process as before) when ``$LANCE_GPU_JIT_TWINS`` is ``0`` or no cache
directory is usable.  Kernels called from other compiled code cannot be
twinned (numba must see a dispatcher there).

Ahead-of-time kernels.  ``lance-gpu compile`` also links every signature its reads ran
into one extension module (:mod:`cuda_kernels._aot`) under the cache directory.  A kernel
called from Python (:class:`LazyDispatcher`, :class:`TwinnedKernel`,
:class:`ForkSafeKernel`) whose arguments' types match an exported signature (the rule is
:func:`cuda_kernels._aot.match`) runs that module's function, without importing numba
(:func:`_aot_function`); any other call goes on as described here.  The location is resolved without importing numba
(:func:`numba_version` reads numba's version file), and so are thread counts
(:func:`get_num_threads`, :func:`set_num_threads`, which :data:`LAZY_NUMBA` hands out for
``numba.get_num_threads`` / ``numba.set_num_threads``): a process whose reads find every
kernel in the module never imports numba.

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
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from . import _aot

__all__ = [
    "CACHE_DIR_ENV",
    "LAZY_NUMBA",
    "RECHECK_SECONDS",
    "TWINS_ENV",
    "ForkSafeKernel",
    "LazyDispatcher",
    "LazyIntrinsic",
    "TwinnedKernel",
    "build_aot",
    "cache_dir",
    "cache_stats",
    "enable_cache",
    "exportable",
    "get_num_threads",
    "lazy_intrinsic",
    "njit",
    "numba_version",
    "prange",
    "serial_only",
    "set_num_threads",
    "source_fingerprint",
    "twin_stats",
    "twins_enabled",
    "wait_for_worker",
    "with_globals",
]

#: Environment variable naming the kernel cache directory (see the module docstring).
CACHE_DIR_ENV = "LANCE_GPU_CACHE_DIR"
#: Environment variable: ``0`` turns numpy twins (and the background compile worker) off.
TWINS_ENV = "LANCE_GPU_JIT_TWINS"
#: Seconds between two looks into the cache for a signature a twin is standing in for.
RECHECK_SECONDS = 0.25
#: Array elements (over all arguments) up to which a call runs its twin rather than set up
#: numba's target context to load cached code (module docstring, "Small calls").
SMALL_CALL_ELEMENTS = 4096
#: CPU seconds of small twin calls after which a process sets numba up after all (a twin call
#: costs tens of microseconds more than compiled code: a process that keeps reading pays
#: the one-off set-up rather than that overhead on every call).  About half the set-up's
#: own cost (~0.4 s): a process never pays more than ~1.6 times the better choice.
SMALL_TWIN_BUDGET_SECONDS = 0.25
_small_twin_seconds = [0.0]


def _target_context_ready() -> bool:
    """Whether numba's CPU target context is set up in this process: its registries loaded
    (``CPUContext.load_additional_registries``, run by the first compile or cache load,
    imports ``numba.np.arraymath`` among others; the context object itself exists as soon
    as a dispatcher does, and costs nothing)."""
    return "numba.np.arraymath" in sys.modules


def _small_call(args: tuple[Any, ...]) -> bool:
    """Whether the array arguments of a call hold at most SMALL_CALL_ELEMENTS elements."""
    total = 0
    for a in args:
        size = getattr(a, "size", None)
        if isinstance(size, int):
            total += size
            if total > SMALL_CALL_ELEMENTS:
                return False
    return True

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


_numba_version: list[str | None] = []


def numba_version() -> str | None:
    """numba's ``__version__`` read from its ``_version.py`` without importing numba (what
    ``numba/__init__.py`` sets it from), or None if that file cannot be read."""
    if not _numba_version:
        import importlib.util
        import re

        found = None
        with contextlib.suppress(ImportError, ValueError, OSError):
            spec = importlib.util.find_spec("numba")
            if spec is not None and spec.origin:
                text = (Path(spec.origin).parent / "_version.py").read_text(encoding="utf-8")
                m = re.search(r'"version":\s*"([^"]+)"', text)
                found = m.group(1) if m else None
        _numba_version.append(found)
    return _numba_version[0]


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
        version = numba_version()
        if version is None:
            import numba

            version = numba.__version__
        leaf = f"numba-{version}-py{sys.version_info[0]}{sys.version_info[1]}-{source_fingerprint_cached()}"
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


_twins_on: list[bool] = []  # [twins_enabled()] once decided


def twins_enabled() -> bool:
    """Whether twinned kernels stand in with numpy for code not compiled yet (module docstring)."""
    if not _twins_on:
        on = os.environ.get(TWINS_ENV, "1") != "0" and cache_dir() is not None
        with _lock:
            if not _twins_on:
                _twins_on.append(on)
    return _twins_on[0]


_NO_MATCH = "No matching definition for argument type"


class TwinnedKernel:
    """A numba CPU dispatcher and its numpy twin (see "Twins" in the module docstring).

    Calls run compiled code when this process has it for the argument types, else
    load it from the cache, else run ``twin`` (and have the worker compile).  With
    twins on, the dispatcher never compiles at call time (``_can_compile`` is off, so a
    call with new types raises numba's "No matching definition" TypeError, which is
    what sends it here); :meth:`compile_here` compiles on purpose.
    """

    def __init__(self, dispatcher: Any, twin: Callable[..., Any]) -> None:
        self._lazy = dispatcher  # a LazyDispatcher (numba's is made on first use)
        self.twin = twin
        self.py_func = dispatcher.py_func
        self.__name__ = dispatcher.py_func.__name__
        self.__qualname__ = dispatcher.py_func.__qualname__
        self.__module__ = dispatcher.py_func.__module__
        self.__doc__ = dispatcher.py_func.__doc__
        self._armed: bool | None = None  # None: undecided; False: twins off
        self._next_look: dict[tuple[Any, ...], float] = {}
        self._look_lock = threading.Lock()
        self.twin_calls = 0
        self._aot_table: dict[Any, Callable[..., Any]] | None = None
        self._aot_parallel = bool(dispatcher._options.get("parallel"))

    @property
    def dispatcher(self) -> Any:
        """The numba dispatcher (numba is imported when it is first asked for)."""
        return _compiled(self._lazy)

    def _compiled_value(self) -> Any:
        return self.dispatcher

    def _arm(self) -> bool:
        on = twins_enabled()
        with _compile_here_lock:
            if self._armed is None:
                if on:
                    self.dispatcher._can_compile = False
                self._armed = on
        return bool(self._armed)

    def __call__(self, *args: Any) -> Any:
        fn = _aot_function(self, args)
        if fn is not None:
            return fn(*args)
        _apply_num_threads()
        if self._armed is False or (self._armed is None and not self._arm()):
            return self.dispatcher(*args)
        if self.dispatcher.overloads:  # else the call would only fail (and set up numba's typing first)
            try:
                return self.dispatcher(*args)
            except TypeError as exc:
                if _NO_MATCH not in str(exc):
                    raise
        return self._cold_call(args)

    def _cold_call(self, args: tuple[Any, ...]) -> Any:
        if _small_twin_seconds[0] < SMALL_TWIN_BUDGET_SECONDS and _small_call(args) and not _target_context_ready():
            t0 = time.thread_time()  # CPU time: the machine's load does not spend the budget
            result = self.twin(*args)  # cheaper than setting up numba to load cached code
            _small_twin_seconds[0] += time.thread_time() - t0
            if result is not NotImplemented:
                self.twin_calls += 1
                if not os.path.exists(self.dispatcher._cache._cache_file._index_path):
                    # nothing of this kernel is cached yet: have the worker compile it, as
                    # for any call on a cold cache (the process loads it when done)
                    sig = tuple(self.dispatcher.typeof_pyval(a) for a in args)
                    if not _worker.requested(self, sig):
                        _worker.request(self, sig)
                return result
        sig = tuple(self.dispatcher.typeof_pyval(a) for a in args)
        # A signature this process sent to its worker is not looked for again here: the worker
        # says when it is compiled, and the process loads it then (``_Worker``), off the reads.
        if not _worker.requested(self, sig) and self._load_cached(sig):
            return self.dispatcher(*args)
        _worker.request(self, sig)
        self.twin_calls += 1
        result = self.twin(*args)
        if result is NotImplemented:  # input the twin leaves to the kernel (errors)
            self.compile_here(sig)
            return self.dispatcher(*args)
        return result

    def _load_cached(self, sig: tuple[Any, ...]) -> bool:
        """Add the cached compiled code for ``sig`` (looked for at most every RECHECK_SECONDS)."""
        d = self.dispatcher
        # One look at a time per kernel: threads arriving while another loads wait for it
        # (rather than run the twin and ask the worker for code that is in the cache).
        with self._look_lock:
            if sig in d.overloads:  # another thread loaded it meanwhile
                return True
            now = time.monotonic()
            if now < self._next_look.get(sig, 0.0):
                return False
            self._next_look[sig] = now + RECHECK_SECONDS
            if not os.path.exists(d._cache._cache_file._index_path):
                # nothing cached for this kernel yet: no lookup, which would first set up
                # numba's target context (a second or more of imports in a cold process)
                return False
            return self._load(sig)

    def _load(self, sig: tuple[Any, ...]) -> bool:
        from numba.core.compiler_lock import global_compiler_lock

        d = self.dispatcher
        with global_compiler_lock:
            if sig in d.overloads:
                return True
            cres = d._cache.load_overload(sig, d.targetctx)
            if cres is None:
                return False
            # as numba's Dispatcher.compile does for a cache hit
            d._cache_hits[sig] += 1
            if not cres.objectmode:
                d.targetctx.insert_user_function(cres.entry_point, cres.fndesc, [cres.library])
            d.add_overload(cres)
        return True

    def compile_here(self, sig: tuple[Any, ...]) -> None:
        """Compile (or load) ``sig`` in this process, whatever the twin state."""
        with _compile_here_lock:
            d = self.dispatcher
            before = d._can_compile
            d._can_compile = True
            try:
                d.compile(sig)
            finally:
                d._can_compile = before

    def __repr__(self) -> str:
        return f"<twinned kernel {self.__module__}.{self.__qualname__}>"


_compile_here_lock = threading.RLock()


class _Worker:
    """The background compile worker of this process (started on the first request).

    The worker writes one line per request it has finished (compiled into the cache, or
    failed).  A thread of this process reads them; when every request sent so far is
    finished, it loads the compiled code of all of them into their kernels, so that later
    calls run it.  Loading first sets up numba's target context (a second or more of
    imports): done then, in that thread, it stays off the first reads, which run twins
    meanwhile (the worker needs longer to compile than a first read takes).
    """

    def __init__(self) -> None:
        self.proc: Any = None
        self.pid = -1  # the process that started ``proc`` (a fork must start its own)
        self.sent: dict[tuple[str, str, tuple[Any, ...]], TwinnedKernel] = {}
        self.pending = 0
        self.done: list[tuple[TwinnedKernel, tuple[Any, ...]]] = []
        self.reader: threading.Thread | None = None
        self.lock = threading.Lock()

    @staticmethod
    def _key(kernel: TwinnedKernel, sig: tuple[Any, ...]) -> tuple[str, str, tuple[Any, ...]]:
        return (kernel.py_func.__module__, kernel.py_func.__qualname__, sig)

    def requested(self, kernel: TwinnedKernel, sig: tuple[Any, ...]) -> bool:
        """Whether this process has sent ``sig`` of ``kernel`` to its worker."""
        return self.pid == os.getpid() and self._key(kernel, sig) in self.sent

    def request(self, kernel: TwinnedKernel, sig: tuple[Any, ...]) -> None:
        import base64
        import pickle

        key = self._key(kernel, sig)
        with self.lock:
            if self.pid != os.getpid():
                self.proc, self.pid, self.sent, self.pending, self.done, self.reader = None, os.getpid(), {}, 0, [], None
            if key in self.sent:
                return
            self.sent[key] = kernel
            try:
                if self.proc is None or self.proc.poll() is not None:
                    self.proc = self._start()
                    self.pending = 0
                    self.reader = threading.Thread(
                        target=self._read_done, args=(self.proc,), name="lance-gpu-jit-loader", daemon=True
                    )
                    self.reader.start()
                line = base64.b64encode(pickle.dumps(key, protocol=4)) + b"\n"
                self.pending += 1
                self.proc.stdin.write(line)
                self.proc.stdin.flush()
            except (OSError, ValueError, pickle.PicklingError) as exc:
                _log.debug("kernel compile worker unavailable: %r", exc)

    def _read_done(self, proc: Any) -> None:
        """Thread: count the worker's finished requests; load them all when none is left."""
        import base64
        import pickle

        for line in proc.stdout:
            try:
                key = pickle.loads(base64.b64decode(line))
            except Exception:  # noqa: BLE001 - a garbled line: that request stays on its twin
                continue
            with self.lock:
                if self.proc is not proc:
                    return
                kernel = self.sent.get(key)
                if kernel is not None:
                    self.done.append((kernel, key[2]))
                self.pending -= 1
                ready = self.done if self.pending <= 0 else []
                if ready:
                    self.done = []
            for kernel, sig in ready:
                try:
                    kernel._load(sig)
                except Exception as exc:  # noqa: BLE001 - not loaded: the twin keeps serving
                    _log.debug("loading compiled %s failed: %r", kernel, exc)

    @staticmethod
    def _start() -> Any:
        import subprocess

        base = cache_dir()
        assert base is not None  # twins are on only with a cache directory
        env = dict(os.environ)
        env[TWINS_ENV] = "0"
        env[CACHE_DIR_ENV] = str(base.parent)
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])
        log = open(base / "compile-worker.log", "ab")  # noqa: SIM115 - handed to the child
        try:
            return subprocess.Popen(
                [sys.executable, "-m", "cuda_kernels._jitworker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
                start_new_session=True,  # outlives this process (and its process group)
            )
        finally:
            log.close()

    def wait(self, timeout: float | None) -> bool:
        with self.lock:
            mine = self.pid == os.getpid()
            proc = self.proc if mine else None
            reader = self.reader if mine else None
        if proc is None:
            return True
        with contextlib.suppress(OSError):
            proc.stdin.close()
        try:
            proc.wait(timeout)
        except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired
            return False
        if reader is not None:
            reader.join(timeout)
        with self.lock:
            if self.proc is proc:
                self.proc, self.reader, self.sent, self.pending, self.done = None, None, {}, 0, []
        return True


_worker = _Worker()


def wait_for_worker(timeout: float | None = None) -> bool:
    """Let this process's compile worker finish its requests (and exit), and this process
    load what it compiled; False on timeout.

    Not needed for correctness (the worker outlives the process); benchmarks and tests
    use it to find a warm cache afterwards.
    """
    return _worker.wait(timeout)


def twin_stats() -> dict[str, int]:
    """Per twinned kernel of this process (``module.qualname``): calls its numpy twin served."""
    return {
        f"{k.__module__}.{k.__qualname__}": k.twin_calls for k in tuple(_twinned) if k.twin_calls
    }


_twinned: list[TwinnedKernel] = []


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
        self._lazy = dispatcher  # a LazyDispatcher (numba's is made on first use)
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
        self._aot_table: dict[Any, Callable[..., Any]] | None = None
        self._aot_parallel = True

    @property
    def dispatcher(self) -> Any:
        """The parallel numba dispatcher (numba is imported when it is first asked for)."""
        return _compiled(self._lazy)

    def _compiled_value(self) -> Any:
        return self.dispatcher

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
        fn = _aot_function(self, args)  # serial code, fork-safe
        if fn is not None:
            return fn(*args)
        if _serial_only[0]:
            return self.serial(*args)
        _apply_num_threads()
        return self._call(*args)

    def __getattr__(self, name: str) -> Any:
        # what the wrapped call offers (a TwinnedKernel's twin, twin_calls, compile_here)
        call = self.__dict__.get("_call")
        if call is None:
            raise AttributeError(name)
        return getattr(call, name)

    def __repr__(self) -> str:
        return f"<fork-safe parallel kernel {self.__module__}.{self.__qualname__}>"


class _LazyNumba:
    """Stands for the ``numba`` module in kernel modules (``from cuda_kernels._jitcache
    import LAZY_NUMBA as numba``): an attribute read from Python imports numba and returns
    numba's; compiled code sees numba itself (:func:`_bind_for_numba`)."""

    def __getattr__(self, name: str) -> Any:
        if name == "get_num_threads":  # no numba import where AOT kernels run (see there)
            return get_num_threads
        if name == "set_num_threads":
            return set_num_threads
        import numba

        return getattr(numba, name)

    def _compiled_value(self) -> Any:
        import numba

        return numba

    def __repr__(self) -> str:
        return "<numba, imported on first use>"


class _LazyPrange:
    """Stands for ``numba.prange`` in kernel modules (``from cuda_kernels._jitcache import
    prange``): ``range`` when called from Python, numba's ``prange`` in compiled code."""

    def __call__(self, *args: int) -> range:
        return range(*args)

    def _compiled_value(self) -> Any:
        import numba

        return numba.prange

    def __repr__(self) -> str:
        return "<numba.prange, bound when compiled>"


class LazyIntrinsic:
    """A ``numba.extending.intrinsic`` built on first compile: ``build()`` (which may import
    numba and llvmlite) returns it.  Compiled code sees the intrinsic; Python cannot call it."""

    def __init__(self, build: Callable[[], Any]) -> None:
        self._build = build
        self._real: Any = None
        self.__name__ = getattr(build, "__name__", "intrinsic")
        self.__doc__ = build.__doc__

    def _compiled_value(self) -> Any:
        if self._real is None:
            with _lazy_lock:
                if self._real is None:
                    self._real = self._build()
        return self._real

    def __repr__(self) -> str:
        return f"<intrinsic {self.__name__}, built when compiled>"


def lazy_intrinsic(build: Callable[[], Any]) -> LazyIntrinsic:
    """Decorator: ``build`` returns a numba intrinsic, made on the first compile that uses it."""
    return LazyIntrinsic(build)


LAZY_NUMBA = _LazyNumba()
prange = _LazyPrange()
_lazy_lock = threading.RLock()


def global_names(code: types.CodeType) -> set[str]:
    """Names that ``code`` (and the code objects nested in it) may load as globals."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= global_names(const)
    return names


def _compiled(value: Any) -> Any:
    """What compiled code must see for ``value``: a lazy kernel's numba dispatcher, numba
    for :data:`LAZY_NUMBA`, ``numba.prange`` for :data:`prange`, a built intrinsic (any
    object whose class has ``_compiled_value``); ``value`` itself otherwise."""
    hook = getattr(type(value), "_compiled_value", None)
    return value if hook is None else hook(value)


def _bind_for_numba(func: Callable[..., Any]) -> Callable[..., Any]:
    """``func``, or a copy of it whose globals name what compiled code must see
    (:func:`_compiled`) where the module holds a lazy stand-in."""
    glb: dict[str, Any] | None = None
    for name in global_names(func.__code__):
        if name not in func.__globals__:
            continue
        value = func.__globals__[name]
        bound = _compiled(value)
        if bound is not value:
            if glb is None:
                glb = dict(func.__globals__)
            glb[name] = bound
    if glb is None:
        return func
    return with_globals(func, glb)


def with_globals(func: Callable[..., Any], glb: dict[str, Any]) -> Callable[..., Any]:
    """A copy of ``func`` whose globals are ``glb`` (its code, defaults, closure and names
    kept): how a kernel's source is bound to what one target must see."""
    copy = types.FunctionType(func.__code__, glb, func.__name__, func.__defaults__, func.__closure__)
    copy.__qualname__ = func.__qualname__
    copy.__module__ = func.__module__
    copy.__doc__ = func.__doc__
    copy.__kwdefaults__ = func.__kwdefaults__
    return copy


def _parallel_pool_started() -> bool:
    """Whether numba's parallel backend has started its thread pool in this process."""
    parallel = sys.modules.get("numba.np.ufunc.parallel")
    return parallel is not None and bool(getattr(parallel, "_is_initialized", False))


def _aot_function(kernel: Any, args: tuple[Any, ...]) -> Callable[..., Any] | None:
    """The ahead-of-time compiled function (:mod:`cuda_kernels._aot`) that runs ``kernel``
    for ``args`` in this process, or None (the call then goes through numba).

    ``kernel`` (a :class:`LazyDispatcher`, :class:`TwinnedKernel` or :class:`ForkSafeKernel`)
    has ``_aot_table`` (None until its first call) and ``_aot_parallel``.  A
    ``parallel=True`` kernel's AOT code is its serial compile: it is used only while
    numba's thread pool is not started here (once it is, numba's parallel code is loaded
    or compiled anyway, and runs on every thread).
    """
    table = kernel._aot_table
    if table is None:
        _aot.load(cache_dir, source_fingerprint_cached, numba_version)
        table = kernel._aot_table = _aot.functions(kernel.__module__, kernel.__qualname__)
    if not table or (kernel._aot_parallel and _parallel_pool_started()):
        return None
    key = _aot.type_key(args)
    return None if key is None else _aot.match(table, key)


def exportable() -> list[_aot.Export]:
    """Every compiled signature of the dispatchers made by :func:`njit` in this process that
    Python calls (not cores inlined into their callers, ``inline="always"``, nor functions
    defined inside functions or the serial variants of parallel kernels): what
    :func:`cuda_kernels._aot.build` exports after ``lance-gpu compile`` ran them all."""
    out: list[_aot.Export] = []
    seen: set[tuple[str, str, tuple[Any, ...]]] = set()
    for d in tuple(_dispatchers):
        f = d.py_func
        if d.targetoptions.get("inline", "never") != "never" or "<locals>" in f.__qualname__:
            continue
        if f.__closure__ or f.__qualname__.endswith("__serial"):
            continue
        for sig in d.signatures:
            ident = (f.__module__, f.__qualname__, tuple(sig))
            if ident in seen:  # a driver's twinned and plain dispatchers compile the same code
                continue
            seen.add(ident)
            restype = d.overloads[sig].signature.return_type
            out.append(_aot.Export(f.__module__, f.__qualname__, d, tuple(sig), restype))
    return out


def build_aot() -> tuple[Path, bool]:
    """Compile every signature this process compiled or loaded (:func:`exportable`) into the
    AOT module of the kernel cache (:func:`cuda_kernels._aot.build`); returns its manifest
    and whether a module was built (not when the published one has all these signatures).
    Raises OSError without a cache directory, and what pycc or the C compiler raise."""
    base = cache_dir()
    if base is None:
        raise OSError("no writable kernel cache directory")
    version = numba_version()
    if version is None:
        import numba

        version = numba.__version__
    return _aot.build(exportable(), base, source_fingerprint_cached(), version)


_threads = threading.local()  # .n: this thread's numba thread count, if set; .applied: numba has it


def set_num_threads(n: int) -> None:
    """``numba.set_num_threads(n)`` for this thread, without importing numba: unless numba's
    thread pool runs already, the count is kept, and given to numba before this thread
    next calls a kernel through numba (or asks :func:`get_num_threads`); a thread that only
    runs AOT kernels never imports numba for it."""
    _threads.n = n
    _threads.applied = False
    if "numba" in sys.modules and _parallel_pool_started():
        _apply_num_threads()


def _apply_num_threads() -> None:
    n = getattr(_threads, "n", None)
    if n is not None and not getattr(_threads, "applied", False):
        import numba

        numba.set_num_threads(n)
        _threads.applied = True


def get_num_threads() -> int:
    """``numba.get_num_threads()`` for this thread, without importing numba where it is not
    needed: the count :func:`set_num_threads` set here, else 1 in a process running AOT
    kernels (:mod:`cuda_kernels._aot`, which are serial) while numba is not loaded, else
    numba's."""
    if "numba" not in sys.modules:
        n = getattr(_threads, "n", None)
        if n is not None:
            return int(n)
        _aot.load(cache_dir, source_fingerprint_cached, numba_version)
        if _aot.loaded():
            return 1
    import numba

    _apply_num_threads()
    return int(numba.get_num_threads())


class LazyDispatcher:
    """An njit kernel whose numba dispatcher is made on first use (a call, or an attribute
    numba's dispatcher has): importing a module of kernels imports no numba.

    When it is made, the function's globals that are lazy stand-ins (other kernels,
    :data:`LAZY_NUMBA`, :data:`prange`, :class:`LazyIntrinsic`) are bound to what they
    stand for (:func:`_bind_for_numba`), and ``cache=True`` attaches the kernel cache.
    Compiled callers see the dispatcher itself (:attr:`real`).
    """

    def __init__(self, func: Callable[..., Any], options: dict[str, Any], cache: bool) -> None:
        self.py_func = func
        self._options = options
        self._cache = cache
        self._real: Any = None
        self._aot_table: dict[Any, Callable[..., Any]] | None = None
        self._aot_parallel = bool(options.get("parallel"))
        self.__name__ = func.__name__
        self.__qualname__ = func.__qualname__
        self.__module__ = func.__module__
        self.__doc__ = func.__doc__

    @property
    def real(self) -> Any:
        """numba's dispatcher (or, under ``NUMBA_DISABLE_JIT=1``, the plain function)."""
        if self._real is None:
            with _lazy_lock:
                if self._real is None:
                    import numba

                    dispatcher = numba.njit(**self._options)(_bind_for_numba(self.py_func))
                    if hasattr(dispatcher, "stats"):  # else NUMBA_DISABLE_JIT=1: the plain function
                        if self._cache:
                            enable_cache(dispatcher)
                        _dispatchers.append(dispatcher)
                    self._real = dispatcher
        return self._real

    def _compiled_value(self) -> Any:
        return self.real

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not kwargs:
            fn = _aot_function(self, args)
            if fn is not None:
                return fn(*args)
        _apply_num_threads()
        return self.real(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_real", "py_func", "_options", "_cache", "_aot_table", "_aot_parallel"):
            raise AttributeError(name)
        return getattr(self.real, name)

    def __repr__(self) -> str:
        return f"<njit kernel {self.__module__}.{self.__qualname__}>"


def njit(func: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``numba.njit`` whose ``cache=True`` uses the kernel cache (:func:`cache_dir`) instead of numba's.

    Usable as ``@njit``, ``@njit(**options)`` or ``njit(**options)(func)``.  It imports no
    numba: it returns a :class:`LazyDispatcher`, whose numba dispatcher is made on first
    use, and compilation stays lazy too (on first call, per signature).  ``twin=f`` (with
    ``cache=True``) returns a :class:`TwinnedKernel` instead (see "Twins" in the module
    docstring); ``parallel=True`` wraps what it returns in a :class:`ForkSafeKernel` (see
    "Fork safety" in the module docstring).  Kernel modules name numba's module and
    ``prange`` through :data:`LAZY_NUMBA` and :data:`prange` (and build intrinsics with
    :func:`lazy_intrinsic`), so that importing them imports no numba either.
    """
    cache = bool(options.pop("cache", False))
    twin = options.pop("twin", None)

    def wrap(f: Callable[..., Any]) -> Any:
        if os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0"):
            return f  # numba's njit would return the plain function
        dispatcher = LazyDispatcher(f, options, cache)
        kernel: Any = dispatcher
        if twin is not None and cache:
            kernel = TwinnedKernel(dispatcher, twin)
            _twinned.append(kernel)
        if options.get("parallel"):
            return ForkSafeKernel(dispatcher, options, cache, call=None if kernel is dispatcher else kernel)
        return kernel

    if func is None:
        return wrap
    return wrap(func)
