"""Compile one plain-Python core for both targets.

Every primitive in this package is written as small *cores*: plain Python
functions, restricted to what both ``numba.njit`` and
``numba.cuda.jit(device=True)`` accept (scalars, array indexing, loops).  The
loops *around* a core differ per target:

* CPU: an ``njit`` *driver* loops over blocks / items (optionally with
  ``prange``) and calls the core; LLVM inlines it.
* GPU: a ``cuda.jit`` *kernel* maps one thread (or lane, or warp) to one unit
  and calls the core once.

Cores, drivers and kernels refer to each other by their module-level names::

    @dual
    def _unpack_value(words, base, ...):      # the core, written once
        ...

    @cpu_driver(parallel=False)
    def _unpack_cpu(words, ...):              # CPU loop
        for ...:
            out[i] = _unpack_value(words, ...)

    @gpu_kernel
    def _unpack_kernel(words, ...):           # GPU loop
        i = cuda.grid(1)
        out[i] = _unpack_value(words, ...)

When a driver or kernel is compiled, a copy of its function is made whose
globals map every :class:`DualFunction` to the right target (``.cpu`` njit
dispatcher or ``.gpu`` device function) and, for kernels, map the name
``cuda`` to :mod:`numba.cuda` (modules bind ``cuda = LAZY_CUDA`` at import so
that importing this package never imports CUDA).  Rebinding the *globals*
(rather than using closures) is what makes the kernels run under the CUDA
simulator too: the simulator swaps module globals that are :mod:`numba.cuda`.

Cores are compiled with ``inline="always"`` on the CPU: numba then inlines
them at the IR level, which LLVM needs to vectorise the driver loops (a core
called across dispatchers is an opaque call, ~10x slower in the bit-unpack
lane loop).

CPU dispatchers use ``cache=True`` through :func:`cuda_kernels._jitcache.njit`:
one per-user cache directory keyed by a fingerprint of every kernel source
(editing any core or driver recompiles; see that module for the location
rules).  Nothing compiles before a driver is first called, and then only for
the argument types of that call.

GPU kernels may be *specialised*: ``kernel.get(T=32)`` compiles a kernel in
which the global name ``T`` is the compile-time constant 32.  Compiled kernels
are cached in a dict keyed by the specialisation, so a hot path never builds a
new dispatcher.  CPU drivers are not specialised this way (numba's on-disk
cache does not hash globals); they specialise on argument types instead.
"""

import inspect
import threading
from typing import Any

from . import _simulator
from ._jitcache import LAZY_NUMBA, ForkSafeKernel, _compiled, global_names, njit, prange, with_globals

__all__ = [
    "LAZY_CUDA",
    "DualFunction",
    "dual",
    "CpuDriver",
    "cpu_driver",
    "GpuKernel",
    "gpu_kernel",
    "GpuSpecialised",
    "gpu_specialised",
    "cuda_module",
]


class _LazyCuda:
    """Placeholder bound to the global name ``cuda`` in kernel modules."""

    def __getattr__(self, name):
        msg = (
            "numba.cuda is bound lazily: GPU kernels get it when they are "
            "compiled through cuda_kernels._target.gpu_kernel(...).get()"
        )
        raise AttributeError(msg)

    def __repr__(self):
        return "<lazy numba.cuda placeholder>"


LAZY_CUDA = _LazyCuda()

_lock = threading.RLock()


def cuda_module():
    """Import and return :mod:`numba.cuda` (lazily, at first GPU use); under the CUDA
    simulator, blocks of kernels whose threads never wait on each other run without a
    Python thread per CUDA thread (:mod:`cuda_kernels._simulator`)."""
    from numba import cuda

    _simulator.install()
    return cuda


def _rebind(pyfunc, target, constants=None):
    """Copy ``pyfunc`` with globals bound for ``target`` ('cpu' or 'gpu')."""
    glb = dict(pyfunc.__globals__)
    # Only the global names the code actually uses are rebound (this also
    # keeps lazily built cores from compiling each other needlessly).
    for name in global_names(pyfunc.__code__):
        if name not in glb:
            continue
        value = glb[name]
        if isinstance(value, DualFunction):
            glb[name] = value.cpu if target == "cpu" else value.gpu
        elif isinstance(value, CpuDriver) and target == "cpu":
            glb[name] = value.dispatcher
        elif value is LAZY_CUDA and target == "gpu":
            glb[name] = cuda_module()
        elif (value is LAZY_NUMBA or value is prange) and target == "gpu":
            glb[name] = _compiled(value)
        elif isinstance(value, GpuSpecialised) and target == "gpu":
            glb[name] = value.build(constants or {})
    if constants:
        glb.update(constants)
    return with_globals(pyfunc, glb)


class DualFunction:
    """A core compiled for the CPU (``.cpu``) and the GPU (``.gpu``), lazily.

    Calling the object itself runs the plain Python function (handy for
    debugging and for pure-Python references).
    """

    def __init__(self, pyfunc, inline="always", gpu_forceinline=False):
        self.py = pyfunc
        self._inline = inline
        self._gpu_forceinline = gpu_forceinline
        self._cpu = None
        self._gpu = None
        self.__name__ = pyfunc.__name__
        self.__qualname__ = pyfunc.__qualname__
        self.__doc__ = pyfunc.__doc__
        self.__module__ = pyfunc.__module__

    @property
    def cpu(self):
        """The ``numba.njit`` dispatcher (compiled on first call, cached on disk)."""
        if self._cpu is None:
            with _lock:
                if self._cpu is None:
                    self._cpu = njit(
                        cache=True, nogil=True, inline=self._inline
                    )(_rebind(self.py, "cpu"))
        return self._cpu

    @property
    def gpu(self):
        """The ``numba.cuda.jit(device=True)`` function (imports CUDA on first use); with
        ``gpu_forceinline`` LLVM inlines it into every caller before optimising, so that a
        caller's constant arguments specialise its body (not under the simulator, which has
        no such option)."""
        if self._gpu is None:
            cuda = cuda_module()
            with _lock:
                if self._gpu is None:
                    self._gpu = cuda.jit(device=True, **_forceinline(self._gpu_forceinline))(_rebind(self.py, "gpu"))
        return self._gpu

    def __call__(self, *args):
        return self.py(*args)

    def _compiled_value(self):
        return _compiled(self.cpu)

    def __repr__(self):
        return f"<dual core {self.__qualname__}>"


def dual(func=None, *, inline="always", gpu_forceinline=False):
    """Decorator: turn a plain Python core into a :class:`DualFunction`."""
    if func is None:
        return lambda f: DualFunction(f, inline=inline, gpu_forceinline=gpu_forceinline)
    return DualFunction(func, inline=inline, gpu_forceinline=gpu_forceinline)


def _forceinline(on: bool) -> dict[str, bool]:
    """``cuda.jit`` options that make a device function inline into its callers (LLVM's
    ``alwaysinline``); none under the simulator, whose ``jit`` does not take them."""
    from numba import config

    return {"forceinline": True} if on and not config.ENABLE_CUDASIM else {}  # type: ignore[attr-defined]  # set at import


def device_function(pyfunc, constants=None, forceinline=False):
    """``pyfunc`` compiled as a CUDA device function whose globals are bound as a kernel's
    (cores to their device functions, ``constants`` as compile-time constant globals)."""
    cuda = cuda_module()
    return cuda.jit(device=True, **_forceinline(forceinline))(_rebind(pyfunc, "gpu", constants))


class GpuSpecialised:
    """A device function built per kernel specialisation: a kernel (or core) naming it as a
    global gets ``factory(**constants)``, the device function for the kernel's compile-time
    constants (``kernel.get(T=32)``: ``factory(T=32)``; those the factory has no parameter
    for are left out), built once per set of constants.

    For device code that differs by more than constant globals can say, e.g. a switch whose
    branches are the bodies of a core specialised on each value of a runtime quantity.
    """

    def __init__(self, factory):
        self.factory = factory
        self._params = frozenset(inspect.signature(factory).parameters)
        self._cache: dict[tuple, Any] = {}
        self.__name__ = factory.__name__
        self.__qualname__ = factory.__qualname__
        self.__doc__ = factory.__doc__

    def build(self, constants):
        """The device function for the constants the factory names (others are ignored)."""
        constants = {k: v for k, v in constants.items() if k in self._params}
        key = tuple(sorted(constants.items()))
        fn = self._cache.get(key)
        if fn is None:
            with _lock:
                fn = self._cache.get(key)
                if fn is None:
                    fn = self.factory(**constants)
                    self._cache[key] = fn
        return fn

    def __repr__(self):
        return f"<gpu specialised {self.__qualname__} ({len(self._cache)} built)>"


def gpu_specialised(factory):
    """Decorator: make ``factory`` a :class:`GpuSpecialised` device function."""
    return GpuSpecialised(factory)


class CpuDriver:
    """A CPU loop compiled with ``numba.njit`` on first call.

    Globals naming :class:`DualFunction` cores (or other drivers) are bound to
    their njit dispatchers.  ``cache=True`` and ``nogil=True`` are on.  ``twin=f``:
    calls from Python go through a numpy twin while the cache is cold (see
    :mod:`cuda_kernels._jitcache`).  A ``parallel=True`` driver called from Python
    runs its serial variant in a process forked from one using GNU OpenMP (see "Fork
    safety" in :mod:`cuda_kernels._jitcache`); compiled callers get :attr:`dispatcher`.
    Calls from Python whose argument types the ahead-of-time module exports run its
    function instead, without numba (:mod:`cuda_kernels._aot`; serial for a parallel driver).
    """

    def __init__(self, pyfunc, twin=None, **options):
        self.py = pyfunc
        self._options: dict[str, Any] = dict(cache=True, nogil=True)
        self._options.update(options)
        self._dispatcher = None
        self.twin = twin
        self._twinned = None
        self._kernel: Any = None  # what calls from Python run (a ForkSafeKernel when parallel)
        self.__name__ = pyfunc.__name__
        self.__qualname__ = pyfunc.__qualname__
        self.__doc__ = pyfunc.__doc__
        self.__module__ = pyfunc.__module__

    @property
    def dispatcher(self):
        """The numba dispatcher (the parallel one for a ``parallel=True`` driver)."""
        if self._dispatcher is None:
            with _lock:
                if self._dispatcher is None:
                    kernel = njit(**self._options)(_rebind(self.py, "cpu"))
                    self._kernel = kernel
                    # the lazy dispatcher: numba is imported when it is first compiled
                    self._dispatcher = kernel._lazy if isinstance(kernel, ForkSafeKernel) else kernel
        return self._dispatcher

    @property
    def twinned(self):
        """Calls from Python with a numpy twin (:class:`~cuda_kernels._jitcache.TwinnedKernel`).

        It holds a dispatcher of its own (same cache entries): compiled callers keep
        :attr:`dispatcher`, which compiles at call time as usual.
        """
        if self._twinned is None:
            with _lock:
                if self._twinned is None:
                    self._twinned = njit(twin=self.twin, **self._options)(_rebind(self.py, "cpu"))
        return self._twinned

    def _compiled_value(self):
        return _compiled(self.dispatcher)

    def __call__(self, *args):
        if self.twin is not None:
            return self.twinned(*args)
        if self._kernel is None:
            self.dispatcher  # noqa: B018 - builds both
        return self._kernel(*args)

    def __repr__(self):
        return f"<cpu driver {self.__qualname__}>"


def cpu_driver(func=None, **options):
    """Decorator: make ``func`` a lazily compiled njit driver (see :class:`CpuDriver`)."""
    if func is None:
        return lambda f: CpuDriver(f, **options)
    return CpuDriver(func, **options)


class GpuKernel:
    """A ``cuda.jit`` kernel source, compiled per specialisation and cached.

    ``get(**constants)`` returns the compiled kernel in which each keyword is a
    compile-time constant global.  The cache is a plain dict keyed by the
    sorted constants, so the same specialisation is compiled once per process.
    """

    def __init__(self, pyfunc, **options):
        self.py = pyfunc
        self._options = options
        self._cache = {}
        self.__name__ = pyfunc.__name__
        self.__qualname__ = pyfunc.__qualname__
        self.__doc__ = pyfunc.__doc__

    def get(self, **constants):
        key = tuple(sorted(constants.items()))
        kernel = self._cache.get(key)
        if kernel is None:
            cuda = cuda_module()
            with _lock:
                kernel = self._cache.get(key)
                if kernel is None:
                    kernel = cuda.jit(**self._options)(
                        _rebind(self.py, "gpu", constants)
                    )
                    self._cache[key] = kernel
        return kernel

    def __repr__(self):
        return f"<gpu kernel {self.__qualname__} ({len(self._cache)} compiled)>"


def gpu_kernel(func=None, **options):
    """Decorator: make ``func`` a cached, lazily compiled CUDA kernel."""
    if func is None:
        return lambda f: GpuKernel(f, **options)
    return GpuKernel(func, **options)
