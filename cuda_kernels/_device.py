"""Small helpers for the GPU entry points (device arrays, scans, launches).

Everything here imports CUDA lazily.  GPU entry points accept numba device
arrays, CuPy arrays or anything with ``__cuda_array_interface__`` (and, for
convenience, NumPy arrays, which are copied to the device).  They return CuPy
arrays when any input was a CuPy array, and numba device arrays otherwise.

Under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) CuPy is never used: the
simulator's "device" arrays live in host memory.
"""

import contextlib
import threading
from typing import Any

import numpy as np

from ._target import LAZY_CUDA, cuda_module, gpu_kernel

cuda = LAZY_CUDA

__all__ = [
    "is_simulator",
    "adopt",
    "get_cupy",
    "wants_cupy",
    "to_device",
    "pinned_uploads",
    "device_empty",
    "device_zeros",
    "device_full",
    "exclusive_scan",
    "exclusive_scan_device",
    "as_output",
    "launch_dims",
    "to_host",
    "allocation_of",
    "work_table",
    "table_prefix",
    "DEFAULT_TPB",
]

DEFAULT_TPB = 256

_cupy_state: list[Any] = []  # [the cupy module, or None] once get_cupy has looked


def is_simulator():
    """True when numba.cuda is the CUDA simulator."""
    from numba import config

    return bool(config.ENABLE_CUDASIM)  # type: ignore[attr-defined]  # numba.config sets its options at import, from the environment


def get_cupy():
    """Return the cupy module, or None (not installed, or simulator on)."""
    if not _cupy_state:
        _cupy_state.append(None if is_simulator() else _import_cupy())
    return _cupy_state[0]


def _import_cupy() -> Any:
    """The cupy module, or None where it cannot be imported."""
    try:
        import cupy
    except Exception:  # ImportError, or a CUDA runtime problem
        return None
    return cupy


def wants_cupy(*arrays):
    """True if any of ``arrays`` is a CuPy array (outputs are then CuPy too)."""
    cp = get_cupy()
    if cp is None:
        return False
    return any(isinstance(a, cp.ndarray) for a in arrays)


def adopt(a):
    """A numba device array viewing the CAI object ``a`` (no copy, no synchronisation).

    For arrays this package just allocated or computed with CuPy.  Our kernels run on the
    legacy default stream (CAI stream 1); work pending on any other stream is waited for
    once, here.  The view carries no stream, so neither numba (at later ``as_cuda_array``)
    nor CuPy (at ``cupy.asarray``) synchronises on it again.  Foreign arrays go through
    :func:`to_device`, which honours their stream every time.
    """
    desc = dict(a.__cuda_array_interface__)
    stream = desc.pop("stream", None)
    cuda = cuda_module()
    if stream is not None and stream != 1:
        cuda.external_stream(stream).synchronize()
    return cuda.from_cuda_array_interface(desc, owner=a, sync=False)


def _is_numba_device_array(x):
    return getattr(x, "__cuda_ndarray__", False) and hasattr(x, "copy_to_host")


# --------------------------------------------------------------------------
# Uploads of small host arrays (kernel arguments) through pinned memory


class _PinnedUploads:
    """Host arrays copied into reusable page-locked blocks and sent to the device with
    asynchronous copies on the legacy stream (the stream our kernels run on, so every
    launch after an upload sees its data): no copy waits for the device.  On a GPU each
    pinned block has a device block of the same size from the pool, and an upload is a
    view of it plus one ``cudaMemcpyAsync`` (a few microseconds, where numba's
    ``to_device`` allocates and copies synchronously).  A block is reused only after the
    scope that filled it has synchronised the legacy stream (see :func:`pinned_uploads`)."""

    BLOCK = 1 << 20
    KEEP = 8  # idle blocks kept per thread
    ALIGN = 16

    def __init__(self, free):
        self.free = free  # this thread's idle [pinned, device] block pairs
        self.blocks = []  # [pinned, device, bytes used] in use by this scope
        self.uploads = 0

    def _room(self, nbytes):
        if self.blocks and -(-self.blocks[-1][2] // self.ALIGN) * self.ALIGN + nbytes <= self.blocks[-1][0].size:
            return
        size = max(self.BLOCK, nbytes)
        pair = next((p for p in self.free if p[0].size >= size), None)
        if pair is None:
            # a device block where CuPy gives pool memory and a raw async copy (else: the
            # simulator, or numba alone, copy per upload)
            pair = [cuda_module().pinned_array(size, dtype=np.uint8), None if get_cupy() is None else device_empty(size, np.uint8)]
        else:
            self.free.remove(pair)
        self.blocks.append([pair[0], pair[1], 0])

    def put(self, arr):
        nbytes = arr.nbytes
        if not nbytes:
            return device_empty(arr.shape, arr.dtype)
        self._room(nbytes)
        entry = self.blocks[-1]
        host, dev = entry[0], entry[1]
        at = -(-entry[2] // self.ALIGN) * self.ALIGN
        entry[2] = at + nbytes
        staged = host[at : at + nbytes]
        staged[:] = arr.reshape(-1).view(np.uint8)
        self.uploads += 1
        if dev is None:  # the simulator (or no CuPy)
            out = device_empty(arr.shape, arr.dtype)
            out.copy_to_device(staged.view(arr.dtype).reshape(arr.shape), stream=cuda_module().legacy_default_stream())
            return out
        from numba.cuda.cudadrv.devicearray import DeviceNDArray

        strides = tuple(int(x) * arr.itemsize for x in np.cumprod((*arr.shape[1:], 1)[::-1])[::-1])  # C order
        out = DeviceNDArray(arr.shape, strides, arr.dtype, gpu_data=dev.gpu_data.view(at, at + nbytes))
        get_cupy().cuda.runtime.memcpyAsync(dev.device_ctypes_pointer.value + at, staged.ctypes.data, nbytes, 1, 0)
        return out

    def close(self):
        # keep a few standard blocks for the next scope; larger ones (one big upload, say
        # the positions of a large take) go back to the driver and the pool
        for p, d, _used in self.blocks:
            if p.size == self.BLOCK and len(self.free) < self.KEEP:
                self.free.append([p, d])
        self.blocks = []


_upload_state = threading.local()


def _upload_scope():
    stack = getattr(_upload_state, "stack", None)
    return stack[-1] if stack else None


@contextlib.contextmanager
def pinned_uploads():
    """Inside the block, host arrays that this thread's kernel wrappers upload (descriptors,
    tables, small arguments) go through pinned memory with asynchronous copies into the
    memory pool instead of one blocking pageable copy and one allocation each.  The legacy
    stream is synchronised when the block ends, before its pinned blocks are reused."""
    stack = getattr(_upload_state, "stack", None)
    if stack is None:
        stack = _upload_state.stack = []
        _upload_state.free = []
    scope = _PinnedUploads(_upload_state.free)
    stack.append(scope)
    try:
        yield scope
    finally:
        stack.pop()
        if scope.blocks:
            cuda_module().legacy_default_stream().synchronize()
        scope.close()


class _WorkTable:
    """A host ``int64`` buffer holding many descriptor arrays (views of it), and its device
    copy: a view of the host buffer uploads as the matching view of the device copy."""

    def __init__(self, host, dev, prefixes):
        self.host = host
        self.dev = dev
        self.lo = host.ctypes.data
        self.hi = self.lo + host.nbytes
        self.prefixes = prefixes  # (address, items) of a lengths view -> its prefix view

    def find(self, arr):
        if arr.dtype != self.host.dtype or arr.ndim != 1 or not arr.size or not arr.flags.c_contiguous:
            return None
        at = arr.ctypes.data
        if at < self.lo or at + arr.nbytes > self.hi:
            return None
        k = (at - self.lo) // self.host.itemsize
        return self.dev[k : k + arr.size]


def _table_scope():
    stack = getattr(_upload_state, "tables", None)
    return stack[-1] if stack else None


@contextlib.contextmanager
def work_table(host, prefixes=None):
    """Upload the ``int64`` host buffer ``host`` in one copy (pinned and asynchronous inside
    :func:`pinned_uploads`); inside the block, this thread's uploads of views of ``host``
    (kernel wrappers' descriptors) are views of that copy, with no copy of their own, and
    ``prefixes`` (``{(address, items) of a lengths view: its exclusive-scan view}``, both
    views of ``host``) spares the wrappers computing and uploading those scans."""
    host = np.ascontiguousarray(host, np.int64)
    dev = _upload(host)
    stack = getattr(_upload_state, "tables", None)
    if stack is None:
        stack = _upload_state.tables = []
    stack.append(_WorkTable(host, dev, dict(prefixes or {})))
    try:
        yield dev
    finally:
        stack.pop()


def table_prefix(lengths):
    """The exclusive scan registered for the host array ``lengths`` by the current
    :func:`work_table` (a view of its buffer), or None."""
    table = _table_scope()
    if table is None or not isinstance(lengths, np.ndarray) or not lengths.size:
        return None
    return table.prefixes.get((lengths.ctypes.data, lengths.size))


def _upload(arr):
    """A device copy of the contiguous host array ``arr`` (pinned and asynchronous inside
    :func:`pinned_uploads`; a view of the current :func:`work_table`'s copy where ``arr``
    is a view of its buffer)."""
    table = _table_scope()
    if table is not None:
        found = table.find(arr)
        if found is not None:
            return found
    scope = _upload_scope()
    if scope is not None and arr.ndim:
        return scope.put(arr)
    return cuda_module().to_device(arr)


def to_device(x, dtype=None):
    """Return a numba device array viewing (or holding a copy of) ``x``.

    Device inputs are not copied.  NumPy inputs are copied to the device.
    ``dtype`` (optional) converts host inputs; device inputs must already have
    a matching itemsize and are reinterpreted with ``.view``.
    """
    cuda = cuda_module()
    if x is None:
        return None
    if is_simulator():
        if getattr(x, "__cuda_ndarray__", False):
            dev = x
        else:
            return _upload(np.ascontiguousarray(x, dtype=dtype))
    elif _is_numba_device_array(x):
        dev = x  # already numba's: re-wrapping would synchronise its stream again
    elif cuda.is_cuda_array(x):
        dev = cuda.as_cuda_array(x)
    else:
        return _upload(np.ascontiguousarray(x, dtype=dtype))
    if dtype is not None and np.dtype(dev.dtype) != np.dtype(dtype):
        if np.dtype(dev.dtype).itemsize != np.dtype(dtype).itemsize:
            msg = f"device array of dtype {dev.dtype} cannot be used as {np.dtype(dtype)}"
            raise TypeError(msg)
        dev = dev.view(np.dtype(dtype))
    return dev


def to_host(x):
    """Copy a device array (numba, CuPy or simulator) to a NumPy array."""
    if isinstance(x, np.ndarray):
        return x
    cp = get_cupy()
    if cp is not None and isinstance(x, cp.ndarray):
        return cp.asnumpy(x)
    if hasattr(x, "copy_to_host"):
        return x.copy_to_host()
    return np.asarray(to_device(x).copy_to_host())


def device_empty(n, dtype):
    """Uninitialised device array of ``n`` items (or of shape ``n``, a tuple).

    With CuPy, the memory comes from CuPy's allocator (its pool, or RMM when the
    application routed CuPy there), so that kernels' outputs share one pool with the
    caller's arrays instead of numba's separate allocations.
    """
    shape = tuple(int(d) for d in n) if isinstance(n, tuple) else (int(n),)
    cp = get_cupy()
    if cp is not None:
        size = int(np.prod(shape, dtype=np.int64))
        flat = cp.empty(max(size, 1), dtype=np.dtype(dtype))[:size]
        return adopt(flat.reshape(shape))
    return cuda_module().device_array(shape if len(shape) > 1 else shape[0], dtype=np.dtype(dtype))


@gpu_kernel
def _fill_kernel(out, value):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = value


def device_full(n, dtype, value):
    """Device array of ``n`` items equal to ``value``."""
    out = device_empty(n, dtype)
    if n:
        blocks, tpb = launch_dims(n)
        _fill_kernel.get()[blocks, tpb](out, np.dtype(dtype).type(value))
    return out


def device_zeros(n, dtype):
    """Zeroed device array of ``n`` items."""
    cp = get_cupy()
    if cp is not None:
        return adopt(cp.zeros(int(n), dtype=dtype))
    return device_full(n, dtype, 0)


def exclusive_scan(lengths, total_dtype=np.int64):
    """Exclusive prefix sum of a device array of ``n`` lengths.

    Returns ``(offsets, total)`` where ``offsets`` is a numba device array of
    ``n + 1`` int64 values starting with 0, and ``total`` is the Python int
    ``offsets[n]`` (read back to the host: callers need it to size outputs).
    With CuPy the scan runs on the device (``cupy.cumsum``); without it (e.g.
    under the simulator) in :func:`exclusive_scan_device`'s serial kernel.
    """
    cuda = cuda_module()
    n = lengths.shape[0]
    cp = get_cupy()
    if cp is not None:
        src = cp.asarray(lengths)
        out = cp.empty(n + 1, dtype=total_dtype)
        out[0] = 0
        if n:
            cp.cumsum(src, dtype=total_dtype, out=out[1:])
        total = int(out[n].get())
        return adopt(out), total
    # the simulator (small inputs): a device scan and one readback of the total, as on a GPU
    offs = exclusive_scan_device(to_device(lengths), total_dtype)
    return offs, int(offs[n : n + 1].copy_to_host()[0])


@gpu_kernel
def _serial_scan_kernel(lengths, n, out):
    if cuda.grid(1) == 0:
        acc = out[0] * 0
        for i in range(n):
            out[i] = acc
            acc += lengths[i]
        out[n] = acc


def exclusive_scan_device(lengths, total_dtype=np.int64):
    """Exclusive prefix sum of a device array of ``n`` lengths, left on the device: an
    ``n + 1`` array starting with 0, nothing read back (``cupy.cumsum`` where CuPy is in
    use; else one serial kernel, for the simulator's small inputs)."""
    n = lengths.shape[0]
    cp = get_cupy()
    if cp is not None:
        src = cp.asarray(lengths)
        out = cp.empty(n + 1, dtype=total_dtype)
        out[:1] = 0
        if n:
            cp.cumsum(src, dtype=total_dtype, out=out[1:])
        return adopt(out)
    out = device_empty(n + 1, total_dtype)
    _serial_scan_kernel.get()[1, 1](lengths, np.int64(n), out)
    return out


def as_output(arr, use_cupy):
    """Wrap a numba device array as CuPy if ``use_cupy`` (zero copy)."""
    if use_cupy:
        return get_cupy().asarray(arr)
    return arr


def launch_dims(n, tpb=DEFAULT_TPB):
    """(blocks, threads per block) covering ``n`` threads (at least one block)."""
    n = int(n)
    tpb = int(tpb)
    blocks = max(1, (n + tpb - 1) // tpb)
    return blocks, tpb


def allocation_of(x):
    """``(key, whole, byte offset)`` of the device allocation holding the contiguous device
    array ``x``: ``whole`` is a uint8 device array over the entire allocation (the pool
    block, under a pool), ``key`` identifies it, and ``x`` starts ``byte offset`` bytes into
    it.  Lets a batched kernel take many views of one allocation as one argument.  Where
    the allocation cannot be found, ``x`` itself (as bytes) is its own allocation."""
    dev = to_device(x)
    if is_simulator():
        host = dev._ary
        root = host
        while isinstance(root.base, np.ndarray):
            root = root.base
        if not (root.flags.c_contiguous and host.flags.c_contiguous):
            return id(host), dev.reshape(-1).view(np.uint8) if dev.ndim > 1 else dev.view(np.uint8), 0
        offset = host.__array_interface__["data"][0] - root.__array_interface__["data"][0]
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        return id(root), FakeCUDAArray(root.reshape(-1).view(np.uint8)), int(offset)
    ptr = int(dev.__cuda_array_interface__["data"][0])
    try:
        from numba.cuda.cudadrv.driver import device_extents

        start, end = device_extents(dev)
    except Exception:  # numba without the helper, or memory the driver does not know
        flat = dev.reshape(-1) if dev.ndim > 1 else dev
        return ptr, flat.view(np.uint8), 0
    desc = {"shape": (int(end) - int(start),), "typestr": "|u1", "data": (int(start), False), "version": 3, "strides": None}
    whole = cuda_module().from_cuda_array_interface(desc, owner=dev, sync=False)
    return int(start), whole, ptr - int(start)
