"""Ahead-of-time compiled CPU kernels: one extension module that runs without numba.

Why.  A fresh process that reads through numba's dispatchers pays for ``import numba``
(~0.2 s CPU), for numba's CPU target context (~0.35 s, scipy included) and for loading each
cached kernel (2-9 ms each): more than half of a first read's cost on a 5M-row table.  The
same machine code, linked into an ordinary CPython extension module by ``numba.pycc``
(which links numba's helper library and runtime into the module), needs only NumPy at run
time and loads in about a millisecond.

Build (``lance-gpu compile``, :func:`build`).  After the compile command has run every
kernel signature reads use, :func:`cuda_kernels._jitcache.exportable` lists each numba
dispatcher called from Python (``module``, ``qualname``) with its compiled signatures;
:func:`build` compiles all of them into one module ``lance_gpu_aot`` for the host CPU
(``target_cpu = "host"``), each with the flags numba's dispatcher gives it (the kernel's
own options: ``nogil``, ``fastmath``, error model...; ``parallel=True`` kernels are
compiled serially, ``prange`` then being ``range``: the results are the same, as for the
serial variants of :class:`~cuda_kernels._jitcache.ForkSafeKernel`).

Layout, under the kernel cache directory of :func:`cuda_kernels._jitcache.cache_dir`
(already one per numba version, Python version and kernel-source fingerprint)::

    aot/manifest.json                 {"format", "fingerprint", "numba", "python", "cpu",
                                       "module": <file name>,
                                       "kernels": {"<module>:<qualname>": [[export, key], ...]}}
    aot/lance_gpu_aot-<token>.so      the extension module the manifest names

Both are written under temporary names and renamed into place (module first, manifest
last) under an ``fcntl`` lock on ``aot/.lock``; module files the manifest no longer names
are deleted then.  A reader therefore sees an old complete pair or the new one.

Use (:func:`functions`).  The first kernel call of a process reads the manifest and, if its
fingerprint, numba and Python versions and CPU (a hash of ``/proc/cpuinfo``'s model and
flags: the code is compiled for this CPU's instruction set) match this process, loads the
module (no numba).  Anything else -- no manifest, a stale or foreign one, a module that
fails to load, ``LANCE_GPU_AOT=0`` -- means no AOT kernels: every call goes through numba
as before.

Dispatch key (:func:`type_key`): per argument what numba's ``typeof`` types, spelled in
NumPy terms: an ``ndarray`` (exact type) as ``(dtype.str, ndim, layout, readonly)`` with
numba's layout rule ('C' if C-contiguous, else 'F' if F-contiguous, else 'A'; numba types
every array as aligned); a scalar as its dtype string (``bool`` ``|b1``, ``int`` ``<i8`` -- ``<u8`` from 2**63
-- ``float`` ``<f8``, a NumPy scalar its own dtype).  Any other argument (None, tuples,
Python objects) gives no key, and the call goes to numba.  A call runs the AOT function
whose key equals its own, else (:func:`match`) one that differs only in taking read-only
some arrays the call passes writable (numba's own safe conversion, where it has no exact
overload: that code never writes those arrays); else it goes to numba.  Errors: the kernels report corrupt
input through returned codes, and the wrappers raise; an exception raised inside compiled
code is raised by the extension's wrapper as numba's is.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "AOT_ENV",
    "MODULE_NAME",
    "Export",
    "build",
    "cpu_key",
    "functions",
    "loaded",
    "match",
    "type_key",
]

#: Environment variable: ``0`` turns the AOT kernels off (every call goes through numba).
AOT_ENV = "LANCE_GPU_AOT"
#: The extension module's name (its ``PyInit_`` symbol); the file name adds a token.
MODULE_NAME = "lance_gpu_aot"
#: Version of the manifest layout.
FORMAT = 1
_SUBDIR = "aot"
_MANIFEST = "manifest.json"

Key = tuple[Any, ...]

_INT64_MIN, _INT64_END, _UINT64_END = -(2**63), 2**63, 2**64


def type_key(args: Sequence[Any]) -> Key | None:
    """The dispatch key of a call's arguments (module docstring), or None if an argument
    has no key (the call then goes through numba)."""
    key: list[Any] = []
    for a in args:
        t = type(a)
        if t is np.ndarray:
            f = a.flags
            layout = "C" if f.c_contiguous else ("F" if f.f_contiguous else "A")
            key.append((a.dtype.str, a.ndim, layout, not f.writeable))
        elif t is bool:
            key.append("|b1")
        elif t is int:
            if _INT64_MIN <= a < _INT64_END:
                key.append("<i8")
            elif _INT64_END <= a < _UINT64_END:
                key.append("<u8")
            else:
                return None
        elif t is float:
            key.append("<f8")
        elif isinstance(a, np.generic):
            key.append(a.dtype.str)
        else:
            return None
    return tuple(key)


def _converts(given: Any, exported: Any) -> bool:
    """Whether an argument of key ``given`` may run code exported for ``exported``: equal,
    or a writable array where the export takes the same array read-only (numba's own safe
    conversion: code typed for a read-only array never writes it)."""
    if given == exported:
        return True
    return type(given) is tuple and type(exported) is tuple and given[:3] == exported[:3] and exported[3] and not given[3]


def match(table: dict[Key, Callable[..., Any]], key: Key) -> Callable[..., Any] | None:
    """The function of ``table`` (one kernel's) for a call of key ``key``: the exact export,
    else one whose arguments ``key``'s convert to (:func:`_converts`), else None.  What a
    key resolves to is remembered in ``table`` (None included)."""
    try:
        return table[key]
    except KeyError:
        pass
    found = None
    for exported, fn in list(table.items()):
        if fn is not None and len(exported) == len(key) and all(map(_converts, key, exported)):
            found = fn
            break
    table[key] = found  # type: ignore[assignment]
    return found


def _numba_type_key(argtypes: Sequence[Any]) -> Key | None:
    """:func:`type_key` of values numba types as ``argtypes``; None if one is not an array
    or a NumPy scalar type (imports numba: build time only)."""
    from numba.core import types
    from numba.np.numpy_support import as_dtype

    key: list[Any] = []
    for t in argtypes:
        try:
            if isinstance(t, types.Array):
                if not t.aligned:  # numba's typeof never gives one
                    return None
                key.append((as_dtype(t.dtype).str, t.ndim, t.layout, not t.mutable))
            elif isinstance(t, (types.Boolean, types.Integer, types.Float, types.NPDatetime, types.NPTimedelta)):
                key.append(as_dtype(t).str)
            else:
                return None
        except NotImplementedError:
            return None
    return tuple(key)


def _as_key(obj: Any) -> Any:
    """JSON lists back to the tuples of a key."""
    return tuple(_as_key(x) for x in obj) if isinstance(obj, list) else obj


def cpu_key() -> str:
    """A hash of what the compiled code depends on in this CPU: the machine, and on Linux
    the first processor's model name and feature flags in ``/proc/cpuinfo``."""
    import platform

    h = hashlib.sha256(platform.machine().encode())
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            seen = 0
            for line in fh:
                name = line.split(":", 1)[0].strip()
                if name in ("model name", "flags", "Features", "CPU part", "vendor_id"):
                    h.update(line.encode())
                    seen += 1
                elif not line.strip() and seen:
                    break  # the first processor's block is enough
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class Export:
    """One compiled signature of a kernel to export: ``dispatcher`` is numba's dispatcher
    (its ``py_func`` is what is compiled, with its ``targetoptions`` and ``locals``)."""

    module: str
    qualname: str
    dispatcher: Any
    argtypes: tuple[Any, ...]
    restype: Any


def _kernel_id(module: str, qualname: str) -> str:
    return f"{module}:{qualname}"


@contextlib.contextmanager
def _dispatcher_flags(exports: dict[int, Export]) -> Iterator[None]:
    """While pycc compiles, compile each exported function with the flags numba's
    dispatcher would use for it (its target options, ``parallel`` dropped), keeping what
    pycc needs (no native compile, NRT, its wrapper settings).

    pycc compiles every export with one ``Flags`` object it made for all, and numba's
    pipeline changes flags it is given (inlining ``inline="always"`` cores does), so a
    later export would be typed differently; a fresh object per function avoids that too.
    """
    import numba.pycc.compiler as pycc_compiler
    from numba.core.compiler import Flags

    original = pycc_compiler.compile_extra

    def compile_extra(typingctx: Any, targetctx: Any, func: Any, args: Any, return_type: Any, flags: Any,
                      **kw: Any) -> Any:
        entry = exports.get(id(func))
        if entry is None:  # not one of ours
            return original(typingctx, targetctx, func, args, return_type, flags, **kw)
        d = entry.dispatcher
        mine: Any = Flags()
        options = {k: v for k, v in d.targetoptions.items() if k != "parallel"}
        d.targetdescr.options.parse_as_flags(mine, options)
        mine.no_compile = flags.no_compile
        mine.no_cpython_wrapper = flags.no_cpython_wrapper
        mine.no_cfunc_wrapper = flags.no_cfunc_wrapper
        mine.nrt = flags.nrt
        kw["locals"] = dict(d.locals)
        return original(typingctx, targetctx, func, args, return_type, mine, **kw)

    pycc_compiler.compile_extra = compile_extra  # type: ignore[assignment]
    try:
        yield
    finally:
        pycc_compiler.compile_extra = original


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: unique file names still never collide
        yield
        return
    with open(directory / ".lock", "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _header(fingerprint: str, numba_version: str) -> dict[str, Any]:
    """What a manifest must say to be used by this process (besides its module and kernels)."""
    return {
        "format": FORMAT,
        "fingerprint": fingerprint,
        "numba": numba_version,
        "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
        "cpu": cpu_key(),
    }


def _read_manifest(directory: Path) -> dict[str, Any] | None:
    try:
        with open(directory / _MANIFEST, encoding="utf-8") as fh:
            manifest = json.load(fh)
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def _signatures(kernels: Any) -> set[tuple[str, Key]]:
    """The (kernel, key) pairs a manifest's ``kernels`` lists (empty if it is garbled)."""
    try:
        return {(kernel, _as_key(key)) for kernel, entries in kernels.items() for _, key in entries}
    except (AttributeError, TypeError, ValueError):
        return set()


def build(exports: Sequence[Export], cache: Path, fingerprint: str, numba_version: str) -> tuple[Path, bool]:
    """Compile ``exports`` into one extension module for this CPU and publish it with its
    manifest under ``cache/aot`` (module docstring); returns the manifest's path and whether
    a module was built: not when the published one, made for this process's sources,
    versions and CPU, already exports every one of them (a second ``lance-gpu compile``,
    which loads from the cache what the first compiled: kernels the first compiled only as
    callees of others are then not among its signatures).

    Exports are named in a sorted order (``k0``, ``k1``...), so that the same signatures give
    the same listing.  Signatures without a key (:func:`_numba_type_key`) are left out.
    Raises what pycc or the C compiler raise (the caller then has no AOT module, and reads
    go through numba).
    """
    import types

    from numba.pycc import CC

    directory = cache / _SUBDIR
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    keyed = sorted(
        ((e.module, e.qualname, key, e) for e in exports if (key := _numba_type_key(e.argtypes)) is not None),
        key=lambda item: (item[0], item[1], repr(item[2])),
    )
    if not keyed:
        raise ValueError("no kernel signature to export")
    kernels: dict[str, list[list[Any]]] = {}
    for n, (module, qualname, key, _) in enumerate(keyed):
        kernels.setdefault(_kernel_id(module, qualname), []).append([f"k{n}", list(key)])
    header = _header(fingerprint, numba_version)
    old = _read_manifest(directory)
    if (old is not None and all(old.get(k) == v for k, v in header.items())
            and _signatures(kernels) <= _signatures(old.get("kernels"))
            and (directory / str(old.get("module"))).is_file()):
        return directory / _MANIFEST, False
    by_func: dict[int, Export] = {}
    with tempfile.TemporaryDirectory(dir=directory, prefix="build-") as tmp:
        cc = CC(MODULE_NAME, source_module=sys.modules[__name__])
        cc.output_dir = tmp
        cc.target_cpu = "host"
        for n, (_, _, _, e) in enumerate(keyed):
            # one function object per export: the flags hook finds its dispatcher by id
            f = e.dispatcher.py_func
            func = types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__, f.__closure__)
            func.__qualname__, func.__module__, func.__kwdefaults__ = f.__qualname__, f.__module__, f.__kwdefaults__
            by_func[id(func)] = e
            cc.export(f"k{n}", e.restype(*e.argtypes))(func)
        with _dispatcher_flags(by_func):
            cc.compile()
        built = Path(tmp) / cc.output_file
        with _locked(directory):
            token = hashlib.sha256(built.read_bytes()).hexdigest()[:16]
            so_name = f"{MODULE_NAME}-{token}{Path(cc.output_file).suffix}"
            os.replace(built, directory / so_name)
            manifest = {**header, "module": so_name, "kernels": kernels}
            fd, tmp_manifest = tempfile.mkstemp(dir=directory, prefix=".manifest-")
            with os.fdopen(fd, "w") as fh:
                json.dump(manifest, fh)
            os.replace(tmp_manifest, directory / _MANIFEST)
            for stale in directory.glob(f"{MODULE_NAME}-*"):
                if stale.name != so_name:
                    with contextlib.suppress(OSError):
                        stale.unlink()
    return directory / _MANIFEST, True


_lock = threading.Lock()
_state: list[dict[str, dict[Key, Callable[..., Any]]]] = []  # [kernel id -> key -> function], once read


def _read(cache: Path | None, fingerprint: str, numba_version: str) -> dict[str, dict[Key, Callable[..., Any]]]:
    """The exported functions of the module published under ``cache``, if it matches this
    process; {} otherwise."""
    if cache is None or os.environ.get(AOT_ENV, "1") == "0":
        return {}
    directory = cache / _SUBDIR
    manifest = _read_manifest(directory)
    if manifest is None or any(manifest.get(k) != v for k, v in _header(fingerprint, numba_version).items()):
        return {}
    import importlib.machinery
    import importlib.util

    try:
        path = directory / str(manifest["module"])
        loader = importlib.machinery.ExtensionFileLoader(MODULE_NAME, str(path))
        spec = importlib.util.spec_from_file_location(MODULE_NAME, path, loader=loader)
        if spec is None:
            return {}
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        out: dict[str, dict[Key, Callable[..., Any]]] = {}
        for kernel, entries in manifest["kernels"].items():
            out[kernel] = {_as_key(key): getattr(module, name) for name, key in entries}
    except Exception:  # noqa: BLE001 - a module that does not load (or a garbled manifest) is no module
        return {}
    return out


def load(cache_dir: Callable[[], Path | None], fingerprint: Callable[[], str], numba_version: Callable[[], str | None]) -> None:
    """Read the published module once per process (the arguments say where and what to expect)."""
    if _state:
        return
    with _lock:
        if _state:
            return
        version = numba_version()
        table = _read(cache_dir(), fingerprint(), version) if version is not None else {}
        _state.append(table)


def loaded() -> bool:
    """Whether this process runs AOT kernels (a module was read and exports something)."""
    return bool(_state and _state[0])


def functions(module: str, qualname: str) -> dict[Key, Callable[..., Any]]:
    """The AOT functions of one kernel by dispatch key ({} if none); :func:`load` first."""
    if not _state:
        return {}
    return _state[0].get(_kernel_id(module, qualname), {})


def _reset_for_tests() -> None:
    """Forget what was read (tests change the cache directory between calls)."""
    with _lock:
        _state.clear()
