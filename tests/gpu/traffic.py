# SPDX-License-Identifier: Apache-2.0
"""Device traffic of a block of code, counted at numba's API under the CUDA simulator.

The simulator runs every kernel on the host, so wall time says nothing about a GPU; what it
does show is what the host asks of the device, and that is what makes a read slow on one:
each launch costs a few microseconds of Python and driver time, each blocking copy back to
the host stalls the host until the device has drained its queue, and each upload from
pageable memory is staged by the driver and serialises with the streams.

:func:`count_device_traffic` patches the simulator's entry points for the duration of a
``with`` block and counts:

``launches``
    kernel launches from the host (``kernel[grid, block](...)``; device functions called
    from kernels are not launches);
``d2h_blocking``
    copies to the host that wait for the device: ``copy_to_host`` without a stream, and the
    write-back numba performs after a launch that was given a NumPy array argument;
``h2d_pageable``
    copies of pageable host memory to the device: ``cuda.to_device`` and
    ``copy_to_device`` of an ordinary NumPy array, and the implicit upload of a NumPy array
    passed to a launch;
``h2d_pinned``
    copies of page-locked memory (``cuda.pinned_array`` results made inside the block) to
    the device;
``h2d_async``
    other copies to the device given a stream (asynchronous: the code under test stages
    them in pinned memory made before the block);
``alloc_bytes``
    bytes of the device arrays allocated (``cuda.device_array``: what every device buffer
    of the reader comes from under the simulator; uploads are not counted here);
``copy_bytes``
    bytes copied device to device by the batched range copy
    (``cuda_kernels.segments._copy_kernel``: its ``total`` argument) and by the batched row
    gather by position (``cuda_kernels.pieces._gather_rows_segments_kernel``) and of variable-width
    rows by position (``_gather_var_segments_kernel``: their bytes), per launch;
``offset_byte_segments``
    descriptors (segments) of the launches that write offsets and variable-width bytes by
    ranges or rows (``segments._copy_kernel``, ``pieces._rebase_kernel``,
    ``pieces._gather_var_segments_kernel``: their segment count), per launch;
``offsets_bytes``
    offsets written by the offsets rebase (``cuda_kernels.pieces._rebase_kernel``: its
    entries times their width), per launch;
``mask_bytes``
    bitmask words written by the bitmask pack, gather and AND (``cuda_kernels.pieces._bitmask_kernel``,
    ``_gather_bits_segments_kernel``, ``_and_bits_kernel``: their words, 4 bytes each), per launch;
``gather_bytes``
    bytes written by the gather kernels (``cuda_kernels.gather``'s fixed-width, row and
    binary gathers and the list gathers'
    ``segments._take_ranges_kernel`` / ``_expand_kernel``: their outputs' bytes), per launch
    (a dictionary decode's gathers among them: count by caller to tell).

Only meaningful with ``NUMBA_ENABLE_CUDASIM=1`` (it raises otherwise).
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Iterator

import numpy as np

_lock = threading.Lock()


class _Pinned(np.ndarray):
    """Marks the simulator's pinned arrays, so their uploads count as pinned."""


def _is_pinned(a) -> bool:
    base = a
    while isinstance(base, np.ndarray):
        if isinstance(base, _Pinned):
            return True
        base = base.base
    return False


def _caller() -> str:
    import sys

    frame = sys._getframe(3)
    kernel_site = None
    while frame is not None:
        name = frame.f_code.co_filename
        if "/lance_gpu/" in name and not name.endswith("/lance_gpu/gpu/_array.py"):  # an allocation's caller, not its helper
            return f"{name.rsplit('/lance_gpu/', 1)[1]}:{frame.f_code.co_name}" + (f" <- {kernel_site}" if kernel_site else "")
        if "/cuda_kernels/" in name and kernel_site is None:
            kernel_site = frame.f_code.co_name
        frame = frame.f_back
    return kernel_site or "?"


@contextlib.contextmanager
def count_device_traffic(where: Counter | None = None) -> Iterator[Counter]:
    """Count the device traffic of the block (see the module docstring) into a Counter;
    ``where`` (optional) also counts ``(kind, caller)`` pairs, the caller being the first
    frame of ``lance_gpu`` outside the kernel wrappers (for finding who asks)."""
    from numba import config

    if not config.ENABLE_CUDASIM:
        msg = "count_device_traffic needs the CUDA simulator (NUMBA_ENABLE_CUDASIM=1)"
        raise RuntimeError(msg)
    from numba import cuda
    from numba.cuda.simulator import kernel as sim_kernel
    from numba.cuda.simulator.cudadrv import devicearray as sim_array

    counts: Counter = Counter()

    def bump(key: str, n: int = 1) -> None:
        with _lock:
            counts[key] += n
            if where is not None:
                where[(key, _caller())] += n

    fake_call = sim_kernel.FakeCUDAKernel.__call__
    copy_to_host = sim_array.FakeCUDAArray.copy_to_host
    copy_to_device = sim_array.FakeCUDAArray.copy_to_device
    to_device = sim_array.to_device
    pinned_array = sim_array.pinned_array
    device_array = sim_array.device_array

    def counted_call(self, *args):
        if not (self._device or sim_kernel._kernel_context):
            bump("launches")
            host_args = sum(1 for a in args if isinstance(a, np.ndarray) and a.ndim > 0)
            if host_args:
                bump("h2d_pageable", host_args)
                bump("d2h_blocking", host_args)
            name = getattr(self.fn, "__name__", "")
            nseg = {"_copy_kernel": 5, "_rebase_kernel": 7, "_gather_var_segments_kernel": 10}.get(name)
            if nseg is not None:
                bump("offset_byte_segments", int(args[nseg]))
            if name == "_copy_kernel":
                bump("copy_bytes", int(args[6]))  # (src, src_starts, dst, dst_starts, prefix, n, total, ...)
            elif name == "_rebase_kernel":  # (src, at, base, shift, stride, dst, prefix, nseg, total, out, ...)
                bump("offsets_bytes", int(args[8]) * int(args[9].dtype.itemsize))
            elif name == "_bitmask_kernel":  # (src, at, counts, dst, column, bits, prefix, nseg, total, ...): words
                bump("mask_bytes", 4 * int(args[8]))
            elif name == "_and_bits_kernel":  # (out, dst, src, column, prefix, nseg, total, ...): words
                bump("mask_bytes", 4 * int(args[6]))
            elif name == "_gather_rows_segments_kernel":  # (src, pos, at, first, width, dst, prefix, nseg, total, ...): bytes
                bump("copy_bytes", int(args[8]))
            elif name == "_gather_var_segments_kernel":  # (offsets, src, pos, delta, at, data, first, dfirst, dst, prefix, ...): bytes
                offs, pos, at, first, prefix = (copy_to_host(args[i]) for i in (0, 2, 4, 6, 9))
                rows = np.concatenate([a + pos[f : f + n] for a, f, n in zip(at, first, np.diff(prefix), strict=True)]).astype(np.int64)
                bump("copy_bytes", int((offs[rows + 1] - offs[rows]).sum()))
            elif name == "_gather_bits_segments_kernel":  # (..., prefix, nseg, total, out, nulls, err): words
                bump("mask_bytes", 4 * int(args[10]))
            elif name in ("_gather_kernel", "_gather_rows_kernel", "_expand_kernel"):
                bump("gather_bytes", int(args[-2].nbytes if name != "_expand_kernel" else args[-1].nbytes))  # (..., out, err) / (..., out)
            elif name in ("_binary_copy_kernel", "_binary_copy_warps_kernel"):  # (offsets, bytes, indices, out_offsets, out_bytes)
                bump("gather_bytes", int(args[3].nbytes) + int(args[4].nbytes))
            elif name == "_take_ranges_kernel":  # (offsets, indices, starts, lengths, err)
                bump("gather_bytes", int(args[2].nbytes) + int(args[3].nbytes))
        return fake_call(self, *args)

    def counted_device_array(*args, **kwargs):
        arr = device_array(*args, **kwargs)
        bump("alloc_bytes", int(arr.nbytes))
        return arr

    def counted_copy_to_host(self, ary=None, stream=0):
        if not stream:
            bump("d2h_blocking")
        else:
            bump("d2h_async")
        return copy_to_host(self, ary, stream)

    def counted_copy_to_device(self, ary, stream=0):
        if isinstance(ary, np.ndarray):
            bump("h2d_pinned" if _is_pinned(ary) else "h2d_async" if stream else "h2d_pageable")
        return copy_to_device(self, ary, stream)

    def counted_to_device(ary, stream=0, copy=True, to=None):
        if to is None:  # with ``to``, copy_to_device counts it
            bump("h2d_pinned" if isinstance(ary, np.ndarray) and _is_pinned(ary) else "h2d_pageable")
        return to_device(ary, stream, copy, to)

    def marked_pinned_array(shape, dtype=np.float64, strides=None, order="C"):
        return pinned_array(shape, dtype, strides, order).view(_Pinned)

    patches = [
        (sim_kernel.FakeCUDAKernel, "__call__", counted_call),
        (sim_array.FakeCUDAArray, "copy_to_host", counted_copy_to_host),
        (sim_array.FakeCUDAArray, "copy_to_device", counted_copy_to_device),
        (sim_array, "to_device", counted_to_device),
        (cuda, "to_device", counted_to_device),
        (sim_array, "pinned_array", marked_pinned_array),
        (cuda, "pinned_array", marked_pinned_array),
        (sim_array, "device_array", counted_device_array),
        (cuda, "device_array", counted_device_array),
    ]
    saved = [(obj, name, getattr(obj, name)) for obj, name, _new in patches]
    for obj, name, new in patches:
        setattr(obj, name, new)
    try:
        yield counts
    finally:
        for obj, name, old in saved:
            setattr(obj, name, old)
